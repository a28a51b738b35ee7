"""Session fixtures for the integration tests: a wheelhouse and a clean venv (see clean_venvs.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from clean_venvs import FRAMEWORK, PIP_TIMEOUT, ROOT, SAMPLE_BACKEND, THIRD_PARTY, Venv, make_venv, tail, wheel_of


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Third-party wheels downloaded once, and our four distributions built into wheels once."""
    house = tmp_path_factory.mktemp("wheelhouse")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    # few retries: where no index is reachable, say so in seconds rather than after pip's default back-off
    proc = subprocess.run([*pip, "download", "--retries", "1", "--timeout", "30", "--only-binary=:all:", "--dest",
                           str(house), *THIRD_PARTY],
                          capture_output=True, text=True, timeout=PIP_TIMEOUT)
    if proc.returncode != 0:
        pytest.skip(f"pip could not download {', '.join(THIRD_PARTY)} (no network or package index here?); the "
                    f"clean-venv installs need them:\n{tail(proc.stderr, 6)}")
    sources = [str(ROOT / p) for p in (*FRAMEWORK, SAMPLE_BACKEND)]
    proc = subprocess.run([*pip, "wheel", "--no-deps", "--no-index", "--find-links", str(house), "--wheel-dir",
                           str(house), *sources], capture_output=True, text=True, timeout=PIP_TIMEOUT)
    if proc.returncode != 0:
        pytest.fail(f"building wheels of {sources} failed:\n{tail(proc.stdout + proc.stderr)}")
    return house


@pytest.fixture(scope="session")
def clean_venv(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Venv:
    """tg-core, tg-compiler, tg-backend-cpu and tg-backend-pyref, installed as regular wheels into a new venv."""
    env = make_venv(tmp_path_factory.mktemp("clean") / "venv")
    wheels = [wheel_of(wheelhouse, d) for d in ("tg-core", "tg-compiler", "tg-backend-cpu", "tg-backend-pyref")]
    env.check_pip("install", "--no-index", "--find-links", wheelhouse, *wheels, what="the regular install")
    return env
