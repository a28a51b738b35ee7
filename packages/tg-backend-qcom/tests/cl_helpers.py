"""The OpenCL backend's ALU test helpers (edge values, the kernel runner, the reference check), loaded from
its test file so that QCOM runs the same tables instead of a copy of them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

CL_ALU_TESTS = Path(__file__).resolve().parents[2] / "tg-backend-opencl" / "tests" / "test_cl_alu.py"
MODULE_NAME = "tg_backend_opencl_alu_helpers"  # not "test_cl_alu": pytest may import that file under its own name


def cl_alu() -> ModuleType:
    if (module := sys.modules.get(MODULE_NAME)) is not None:
        return module
    if not CL_ALU_TESTS.exists():
        pytest.skip(f"the OpenCL backend's ALU tests are not at {CL_ALU_TESTS} (run from the monorepo checkout)")
    spec = importlib.util.spec_from_file_location(MODULE_NAME, CL_ALU_TESTS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module
    spec.loader.exec_module(module)
    return module
