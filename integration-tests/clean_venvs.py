"""Clean virtual environments for the integration tests: the helpers (the fixtures are in conftest.py).

The tests run in whatever interpreter runs pytest (the nox `integration` session, or a developer's
venv), but what they check happens in fresh venvs made here, so nothing of the developer's editable
installs leaks in:

* `wheelhouse` (per session): the third-party wheels the installs need (numpy, pluggy, llvmlite, and hatchling
  with `editables` to build our packages; pytest for running the op tests) are downloaded once with
  pip, then our four distributions are built into wheels once. Every later pip call is
  `--no-index --find-links <wheelhouse>`, so only that first download needs a package index. Where
  it cannot be reached, the tests skip and say why.
* `clean_venv` (per session): a venv with tg-core, tg-compiler, tg-backend-cpu and the sample
  backend tg-backend-pyref installed from those wheels as regular (non-editable) installs.
* `Venv.install_target(...)`: extra packages installed with `pip --target` into a folder that one
  subprocess puts on PYTHONPATH, so a test can add plugins without changing the shared venv.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORK = ("packages/tg-core", "packages/tg-compiler", "packages/tg-backend-cpu")
SAMPLE_BACKEND = "integration-tests/sample_backend"
#: what our installs and builds pull from an index: runtime deps of tg-core and tg-backend-cpu (llvmlite), the
#: build backend our pyproject files pin (with `editables`, which hatchling needs for editable installs), and pytest
THIRD_PARTY = ("numpy>=1.26", "pluggy>=1.5", "llvmlite==0.50.0", "hatchling==1.27.0", "editables", "pytest",
               "pytest-xdist")
#: environment variables that would change what a subprocess sees: none leak in from the caller
SCRUBBED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DEV", "DEBUG", "BEAM", "NOOPT", "PIP_REQUIRE_VIRTUALENV")
PIP_TIMEOUT = 300


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(line for line in text.strip().splitlines()[-lines:] if "is ignored: it is neither" not in line)


@dataclass
class Venv:
    path: Path
    cache_dir: Path  # TINYGRAD_CACHE_DIR for its processes: a fresh install starts with no compiled kernels

    @property
    def python(self) -> Path:
        return self.path / ("Scripts" if os.name == "nt" else "bin") / "python"

    def env(self, extra: Mapping[str, str] | None = None, path: Iterable[Path] = ()) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in SCRUBBED and not k.startswith("TINYGRAD_")}
        env["PATH"] = f"{self.python.parent}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONNOUSERSITE"] = "1"
        env["TINYGRAD_CACHE_DIR"] = str(self.cache_dir)
        if extra_path := [str(p) for p in path]:
            env["PYTHONPATH"] = os.pathsep.join(extra_path)
        env.update(extra or {})
        return env

    def run(self, *args: str | Path, env: Mapping[str, str] | None = None, path: Iterable[Path] = (),
            cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run this venv's python with `args`; `env` adds variables, `path` goes on PYTHONPATH."""
        return subprocess.run([str(self.python), *map(str, args)], capture_output=True, text=True,
                              env=self.env(env, path), cwd=cwd or self.cache_dir.parent, timeout=timeout)

    def code(self, source: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return self.run("-c", source, **kw)  # type: ignore[arg-type]

    def pip(self, *args: str | Path, timeout: float = PIP_TIMEOUT) -> subprocess.CompletedProcess[str]:
        return self.run("-m", "pip", "--disable-pip-version-check", *args, timeout=timeout)

    def check_pip(self, *args: str | Path, what: str) -> None:
        proc = self.pip(*args)
        if proc.returncode != 0:
            pytest.fail(f"{what} failed (pip {' '.join(map(str, args))}):\n{tail(proc.stdout + proc.stderr)}")

    def install_target(self, target: Path, *packages: str | Path, wheelhouse: Path) -> None:
        """pip install packages (built from their folders) into `target`, from the wheelhouse only."""
        self.check_pip("install", "--no-index", "--find-links", wheelhouse, "--no-deps", "--target", target,
                       *packages, what=f"installing {[str(p) for p in packages]} into {target}")


def make_venv(path: Path) -> Venv:
    try:
        venv.EnvBuilder(with_pip=True, clear=True).create(path)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot create a virtual environment with {sys.executable} -m venv here ({e}); on Debian "
                    "install python3-venv")
    cache = path.parent / f"{path.name}-kernel-cache"
    cache.mkdir(exist_ok=True)
    return Venv(path, cache)


def wheel_of(house: Path, distribution: str) -> Path:
    found = sorted(house.glob(f"{distribution.replace('-', '_')}-*.whl"))
    if len(found) != 1:
        pytest.fail(f"expected one wheel of {distribution} in {house}, found {[p.name for p in found]}")
    return found[0]
