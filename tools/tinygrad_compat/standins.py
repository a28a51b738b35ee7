"""Stand-ins for the names on the internals list, for running tinygrad's own tests and examples.

Loaded into the process that runs them (`python -m pytest -p standins`, or imported first by an example
driver). It adds an import hook: a module on the internals list that the tinygrad under test does not have
becomes an empty module, and a listed name that a module lacks becomes a stand-in. Nothing else changes:
a public name that is missing stays an ImportError, so the file fails to collect and the table shows it.

A stand-in is inert until used: a CamelCase one is a class (`isinstance(x, Renderer)` is False, making one
raises), any other is a value that raises StandInUsed when called, compared, iterated or tested for truth.
A test that needs the internal thing therefore fails, on either side, and only that test.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any, NoReturn

from internals import MODULES, NAMES, is_internal


class StandInUsed(Exception):
    """A test used a name of tinygrad's compiler internals that the tinygrad under test does not have."""


def _used(path: str) -> NoReturn:
    raise StandInUsed(f"{path} is a tinygrad internal (tools/tinygrad_compat/internals.py); this tinygrad lacks it")


class StandInValue:
    def __init__(self, path: str) -> None:
        object.__setattr__(self, "_path", path)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return stand_in(f"{self._path}.{name}", name)

    def __repr__(self) -> str:
        return f"<stand-in {self._path}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _used(self._path)

    def __bool__(self) -> bool:
        _used(self._path)

    def __iter__(self) -> Any:
        _used(self._path)

    def __eq__(self, other: object) -> bool:
        _used(self._path)

    def __lt__(self, other: object) -> bool:
        _used(self._path)

    __le__ = __gt__ = __ge__ = __lt__
    __hash__ = object.__hash__

    def __getitem__(self, key: Any) -> Any:
        _used(self._path)

    def __int__(self) -> int:
        _used(self._path)

    __index__ = __float__ = __len__ = __int__


class _StandInMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return stand_in(f"{cls.__qualname__}.{name}", name)


class StandInClass(metaclass=_StandInMeta):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _used(type(self).__qualname__)


def stand_in(path: str, name: str) -> Any:
    if name[:1].isupper() and not name.isupper():
        return _StandInMeta(name, (StandInClass,), {"__qualname__": path, "__module__": path.rpartition(".")[0]})
    return StandInValue(path)


def _member_stand_ins(module: types.ModuleType) -> None:
    """Listed members of a class the module has (`Ops.CUSTOM_FUNCTION`) that the class lacks become stand-ins on it:
    `u.op is Ops.CUSTOM_FUNCTION` is then False, and any other use raises."""
    for dotted in NAMES.get(module.__name__, {}):
        owner_name, _, member = dotted.partition(".")
        owner = module.__dict__.get(owner_name)
        if member and owner is not None and not hasattr(owner, member):
            setattr(owner, member, StandInValue(f"{module.__name__}.{dotted}"))


def _fallback_getattr(module: types.ModuleType, everything: bool) -> None:
    """Give `module` a module-level __getattr__ that answers its listed names (all names when `everything`)."""
    _member_stand_ins(module)
    own = module.__dict__.get("__getattr__")
    listed = NAMES.get(module.__name__, {})

    def __getattr__(name: str) -> Any:
        if own is not None:
            try:
                return own(name)
            except AttributeError:
                pass
        if (everything and not name.startswith("__")) or name in listed:
            value = stand_in(f"{module.__name__}.{name}", name)
            setattr(module, name, value)
            return value
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
    module.__getattr__ = __getattr__  # type: ignore[method-assign]


class _WrappedLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, everything: bool) -> None:
        self.inner, self.everything = inner, everything

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.inner.exec_module(module)
        _fallback_getattr(module, self.everything)


class _EmptyLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # a package, so that its submodules import as stand-ins too
        _fallback_getattr(module, everything=True)


class StandInFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        whole = is_internal(fullname)
        if not whole and fullname not in NAMES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            try:
                spec = finder.find_spec(fullname, path, target)
            except ImportError:
                spec = None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _WrappedLoader(spec.loader, whole)
                return spec
        if whole:
            return importlib.util.spec_from_loader(fullname, _EmptyLoader(), is_package=True)
        return None


def install() -> None:
    if not any(isinstance(f, StandInFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, StandInFinder())
    # modules already imported before the hook (tinygrad itself imports some of them) get the fallback too
    for name, module in list(sys.modules.items()):
        if module is not None and (is_internal(name) or name in NAMES):
            _fallback_getattr(module, is_internal(name))


install()
assert set(MODULES) and set(NAMES)
