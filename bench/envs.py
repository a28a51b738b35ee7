"""The Python environments the frameworks run in, one per framework, made on first use and reused.

tinygrad 0.14.0 and this project share the import name `tinygrad`, so they can never share a venv;
PyTorch gets its own too, so that its threads and allocator never meet the others'. The venvs live
under a cache directory outside the repository ($TG_BENCH_CACHE, else ~/.cache/tg-bench).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TORCH_REQUIREMENTS = ["torch==2.13.0", "numpy"]
TINYGRAD_REQUIREMENTS = ["tinygrad==0.14.0", "numpy"]
# this project's packages; backends and tg-nn are added when they exist in the checkout
OURS_CORE = ["tg-core", "tg-compiler", "tg-backend-cpu"]
OURS_OPTIONAL = ["tg-nn", "tg-backend-opencl", "tg-backend-webgpu"]


def cache_root() -> Path:
    override = os.environ.get("TG_BENCH_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "tg-bench"


@dataclass(frozen=True)
class Framework:
    key: str  # short id used on the command line and by the workers
    label: str  # how tables name it
    python: str | None  # the interpreter its worker runs in; None when unavailable
    why_missing: str = ""  # when python is None: the reason, for the table
    env: tuple[tuple[str, str], ...] = ()  # set in its worker's environment (this project's CPU compiler path)

    @property
    def kind(self) -> str:
        """The framework the worker runs (`ours` for every compiler path of this project)."""
        return self.key.split("-", 1)[0]


#: this project's CPU compiler paths, each a row of its own: LLVM (the default), then the C compilers
CPU_COMPILERS = ("llvm", "clang", "gcc")


def compiler_paths(fws: list[Framework], compilers: list[str]) -> list[Framework]:
    """`fws` with this project's entry repeated for each CPU compiler path in `compilers` (CPU_COMPILER=...):
    keys `ours` (the first path), `ours-clang`, `ours-gcc`; labels name the path."""
    unknown = [c for c in compilers if c not in CPU_COMPILERS]
    if unknown or not compilers:
        raise SystemExit(f"unknown CPU compiler path(s) {unknown or compilers}; choose from {list(CPU_COMPILERS)}")
    out = []
    for fw in fws:
        if fw.key != "ours":
            out.append(fw)
            continue
        for i, compiler in enumerate(compilers):
            out.append(Framework("ours" if i == 0 else f"ours-{compiler}", f"{fw.label} ({compiler})", fw.python,
                                 fw.why_missing, (("CPU_COMPILER", compiler),)))
    return out


def _venv_python(path: Path) -> Path:
    return path / "bin" / "python"


def _pip(python: Path, *args: str) -> None:
    cmd = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    print(f"[bench] {' '.join(cmd)}", file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)


def ensure_venv(name: str, requirements: list[str]) -> Path:
    """A venv named `name` holding `requirements`; rebuilt when the requirement list changes."""
    path = cache_root() / name
    marker = path / "bench-requirements.json"
    if marker.exists() and json.loads(marker.read_text()) == requirements and _venv_python(path).exists():
        return _venv_python(path)
    print(f"[bench] creating the venv {path} (once; reused by later runs)", file=sys.stderr, flush=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    _pip(_venv_python(path), *requirements)
    marker.write_text(json.dumps(requirements))
    return _venv_python(path)


def _imports_this_repo(python: str) -> bool:
    """Whether `python` imports tinygrad (with its compiler) from this checkout, not another install."""
    probe = "import tinygrad, tinygrad.codegen, tg_backend_cpu; print(tinygrad.__path__[0])"
    try:
        found = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return found.returncode == 0 and found.stdout.strip().startswith(str(REPO))


def _ours_python() -> str:
    if _imports_this_repo(sys.executable):
        return sys.executable
    packages = OURS_CORE + [p for p in OURS_OPTIONAL if (REPO / "packages" / p / "pyproject.toml").exists()]
    path = cache_root() / "this-project"
    marker = path / "bench-requirements.json"
    if not (marker.exists() and json.loads(marker.read_text()) == packages):
        venv.EnvBuilder(with_pip=True, clear=True).create(path)
        _pip(_venv_python(path), *[arg for p in packages for arg in ("-e", str(REPO / "packages" / p))])
        marker.write_text(json.dumps(packages))
    return str(_venv_python(path))


class VenvAbsent(Exception):
    """--no-setup was given and the framework's venv was never made."""


def _try(label: str, key: str, make: Callable[[], object]) -> Framework:
    try:
        return Framework(key, label, str(make()))
    except VenvAbsent as absent:
        return Framework(key, label, None, f"n/a ({absent})")
    except (subprocess.CalledProcessError, OSError) as err:
        return Framework(key, label, None, f"n/a (its venv could not be made: {err})")


def frameworks(wanted: list[str], setup: bool = True) -> list[Framework]:
    """The frameworks named in `wanted` (numpy, torch, tinygrad, ours), in that order.

    With setup=False, a venv that does not exist yet is reported missing instead of being made
    (the smoke test uses this so that it never downloads anything).
    """
    def existing(name: str, requirements: list[str]) -> Callable[[], object]:
        if setup:
            return lambda: ensure_venv(name, requirements)

        def only_existing() -> Path:
            python = _venv_python(cache_root() / name)
            if not python.exists():
                raise VenvAbsent(f"no venv at {python.parent.parent}; `python bench/envs.py` makes it")
            return python
        return only_existing

    makers = {
        "numpy": ("numpy", _ours_python),
        "torch": ("PyTorch 2.13.0", existing("torch-2.13.0", TORCH_REQUIREMENTS)),
        "tinygrad": ("tinygrad 0.14.0", existing("tinygrad-0.14.0", TINYGRAD_REQUIREMENTS)),
        "ours": ("this project", _ours_python),
    }
    unknown = [w for w in wanted if w not in makers]
    if unknown:
        raise SystemExit(f"unknown framework(s) {unknown}; choose from {list(makers)}")
    return [_try(makers[key][0], key, makers[key][1]) for key in makers if key in wanted]


if __name__ == "__main__":  # `python bench/envs.py` makes every venv ahead of a run
    for fw in frameworks(["numpy", "torch", "tinygrad", "ours"]):
        print(f"{fw.label:18} {fw.python or fw.why_missing}")


def cpu_name() -> str:
    """The processor's model name, for a bench's header (machines differ: every ratio names its CPU)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"
