"""The compile-only contract: how a backend lets the kit compile for its device where the device is absent.

    pytest --pyargs tinygrad.conformance --tg-device=CUDA --tg-compile-only --tg-target=sm_90

A backend that can render and compile without its hardware (a compiler in a wheel or on PATH) says so in the
same plugin module its `tinygrad.backends` entry point names, with a second pluggy hook next to
`tinygrad_backends()`:

    from tinygrad.device import hookimpl

    @hookimpl
    def tinygrad_compile_only():
        from tinygrad.conformance.compile_only import CompileOnlyBackend  # in the hook: discovery stays light
        return [CompileOnlyBackend(name="CUDA", targets=_targets, make=_make, check=_tools_missing,
                                   description="NVRTC: CUDA C++ to SASS (a cubin) for the target")]

`make(target)` returns the backend's renderer and compiler for that target, exactly the pair its device would
use there; everything else (the stand-in device that builds kernels but runs none, the per-kernel compile, the
failure report and the summary) is the kit's (`tinygrad.conformance.standin`). The hook spec is
`CompileOnlyHooks`; it uses the `tinygrad` pluggy project, so `tinygrad.device.hookimpl` marks it. Core's device
registry ignores the hook; the kit finds it through the same entry points (`compile_only_backends`).

This module imports neither pytest nor the compiler: backends' plugin modules may import it.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pluggy
from tinygrad.device import ENTRY_POINT_GROUP, NO_AUTOLOAD_ENV

if TYPE_CHECKING:
    from tinygrad.renderer import Renderer
    from tinygrad.runtime.compiler import Compiler

hookspec = pluggy.HookspecMarker("tinygrad")


@dataclass(frozen=True)
class CompileOnlyBackend:
    """What a backend gives the kit's compile-only mode. Cheap to make: heavy imports happen in the callables."""

    #: the device name, as the backend's `BackendInfo.name` ("CUDA")
    name: str
    #: the targets it compiles for ("sm_80", "sm_90", ...), which `--tg-target` must name; may ask the compiler
    targets: Callable[[], Sequence[str]]
    #: the renderer and compiler of one target (a name from `targets()`), as the device would use them there
    make: Callable[[str], tuple[Renderer, Compiler]]
    #: None when the compiler works here, else why not and how to install it (the kit's checks then skip with it)
    check: Callable[[], str | None] = field(default=lambda: None)
    #: what compiling means for this backend, shown in the report ("NVRTC: CUDA C++ to SASS for the target")
    description: str = ""
    package: str = ""  # filled in by discovery
    version: str = ""


class CompileOnlyHooks:
    """The hook specification of compile-only support (beside `tinygrad.device.BackendHooks`)."""

    @hookspec
    def tinygrad_compile_only(self) -> Sequence[CompileOnlyBackend]:  # type: ignore[empty-body]
        """Return the backends this plugin can render and compile for without their device. Must be cheap."""


@dataclass
class _Registry:
    manager: pluggy.PluginManager | None = None
    discovered: bool = False
    broken: dict[str, str] = field(default_factory=dict)  # plugin name -> why it could not be loaded
    dists: dict[str, tuple[str, str]] = field(default_factory=dict)  # plugin name -> (package, version)


_REGISTRY = _Registry()


def _manager() -> pluggy.PluginManager:
    if _REGISTRY.manager is None:
        pm = pluggy.PluginManager("tinygrad")
        pm.add_hookspecs(CompileOnlyHooks)
        _REGISTRY.manager = pm
    return _REGISTRY.manager


def register_plugin(module: object, name: str | None = None, package: str = "", version: str = "") -> None:
    """Register a plugin module implementing `tinygrad_compile_only` by hand (an uninstalled backend, tests)."""
    pm = _manager()
    plugin_name = str(name or getattr(module, "__name__", None) or repr(module))
    if pm.has_plugin(plugin_name):
        pm.unregister(name=plugin_name)
    pm.register(module, name=plugin_name)
    _REGISTRY.dists[plugin_name] = (package, version)


def unregister_plugin(name: str) -> None:
    pm = _manager()
    if pm.has_plugin(name):
        pm.unregister(name=name)


def _discover() -> None:
    if _REGISTRY.discovered:
        return
    _REGISTRY.discovered = True
    if os.environ.get(NO_AUTOLOAD_ENV, "0") not in ("", "0"):
        return
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        try:
            module = ep.load()  # the module core's discovery imported already
        except Exception as e:  # core reports it too; here it only means no compile-only support from it
            _REGISTRY.broken[ep.name] = f"{type(e).__name__}: {e}"
            continue
        if not _manager().has_plugin(ep.name):
            register_plugin(module, name=ep.name, package=dist.name if dist is not None else "",
                            version=dist.version if dist is not None else "")


def compile_only_backends() -> dict[str, CompileOnlyBackend]:
    """The backends with compile-only support here, by upper-case device name."""
    _discover()
    pm = _manager()
    found: dict[str, CompileOnlyBackend] = {}
    for plugin in pm.get_plugins():
        plugin_name = pm.get_name(plugin)
        if not any(impl.plugin_name == plugin_name for impl in pm.hook.tinygrad_compile_only.get_hookimpls()):
            continue
        others = [p for p in pm.get_plugins() if p is not plugin]
        try:
            results = pm.subset_hook_caller("tinygrad_compile_only", remove_plugins=others)()
        except Exception as e:  # a broken hook hides only its own backends
            _REGISTRY.broken[str(plugin_name)] = f"tinygrad_compile_only() raised {type(e).__name__}: {e}"
            continue
        package, version = _REGISTRY.dists.get(str(plugin_name), ("", ""))
        for backend in results[0] if results else ():
            found[backend.name.upper()] = _with_dist(backend, package, version)
    return found


def _with_dist(backend: CompileOnlyBackend, package: str, version: str) -> CompileOnlyBackend:
    from dataclasses import replace

    return replace(backend, package=backend.package or package, version=backend.version or version)


def broken_plugins() -> dict[str, str]:
    _discover()
    return dict(_REGISTRY.broken)


def valid_targets(backend: CompileOnlyBackend) -> tuple[str, ...]:
    return tuple(str(t) for t in backend.targets())


def describe_missing(name: str) -> str:
    """Why `--tg-compile-only` cannot be used for device `name`, and what can."""
    supported = sorted(compile_only_backends())
    broken = broken_plugins()
    extra = f" (plugins that failed to load: {', '.join(f'{k}: {v}' for k, v in sorted(broken.items()))})" \
        if broken else ""
    return (f"backend {name} has no compile-only support: its plugin module provides no tinygrad_compile_only() "
            f"hook (see tinygrad.conformance.compile_only). Backends with it here: "
            f"{', '.join(supported) or 'none'}{extra}")




def run_pytest(args: Sequence[str], device: str, target: str, report: str, cwd: str | None = None,
               env: dict[str, str] | None = None, workers: int | None = None,
               timeout: float = 3600) -> tuple[int, str, dict]:
    """Run pytest in compile-only mode in a subprocess (`args`: what to run, e.g. `--pyargs tinygrad.conformance`
    or a test file) and return its exit code, its output and its `--tg-report` JSON (`compile_only` holds the
    count of kernels compiled and the failures). For a backend's own tests; `workers` defaults to
    $PYTEST_WORKERS or 2 (xdist)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    n = str(workers if workers is not None else os.environ.get("PYTEST_WORKERS", "2"))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", n, *args, f"--tg-device={device}",
           "--tg-compile-only", f"--tg-target={target}", f"--tg-report={report}"]
    proc = subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)
    path = Path(report)
    data = json.loads(path.read_text()) if path.exists() else {}
    return proc.returncode, proc.stdout + proc.stderr, data


def check_tables_compile(args: Sequence[str], device: str, target: str, report: str, *, at_least: int,
                         opt_in: str, session: str, cwd: str | None = None, env: dict[str, str] | None = None) -> None:
    """A backend's test that every kernel of `args` (the kit, or the op table) compiles for `target`: skipped
    unless $`opt_in` is 1 (it compiles for minutes; nox `session` runs the kit directly), else `run_pytest` and an
    assertion with the output's tail when fewer than `at_least` kernels compiled, any failed or pytest failed."""
    import pytest

    if os.environ.get(opt_in) != "1":
        pytest.skip(f"compiling every kernel of the conformance kit or the op table takes minutes: set {opt_in}=1 "
                    f"(nox -s {session} runs the kit directly)")
    code, output, data = run_pytest(args, device, target, report, cwd=cwd, env=env)
    compiled = data.get("compile_only", {})
    print(output.splitlines()[-1] if output.strip() else "(no output)", compiled.get("kernels_compiled"))
    assert compiled.get("kernels_compiled", 0) >= at_least, output[-3000:]
    assert not compiled.get("failures"), output[-6000:]
    assert code == 0, output[-3000:]


__all__ = ["CompileOnlyBackend", "CompileOnlyHooks", "check_tables_compile", "compile_only_backends",
           "describe_missing", "hookspec", "register_plugin", "run_pytest", "unregister_plugin", "valid_targets"]
