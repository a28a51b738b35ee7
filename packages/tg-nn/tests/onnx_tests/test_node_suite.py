"""The ONNX backend node tests (every case onnx ships for its operators) through tinygrad.onnx on the default
device, against the stored outputs: float32/float64 within rtol 1e-3 / atol 1e-4, float16 and the small floats
looser, integers and bools exactly. A case whose op (or op feature) is not implemented, or whose dtype the device
lacks, is skipped with the reason; KNOWN_WRONG lists the cases that run but disagree (strict xfails). The counts
are printed at the end of the session (conftest.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the node tests and their data come from the onnx package")

from node_data import node_data_dir, read_value  # noqa: E402
from tinygrad import Tensor  # noqa: E402
from tinygrad.errors import DeviceDTypeError  # noqa: E402
from tinygrad.onnx import OnnxRunner  # noqa: E402

DATA = node_data_dir(onnx)
CASES = sorted(p.name for p in DATA.iterdir() if (p / "model.onnx").is_file())

#: cases that run and give a wrong answer, with the reason (strict xfail: a fix makes them fail until removed)
KNOWN_WRONG: dict[str, str] = {}

#: ops whose outputs are random: only shapes and dtypes are compared
RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial"}
_NATIVE = {"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
           "float64"}


def _is_random(model: Any, name: str) -> bool:
    if any(n.op_type in RANDOM_OPS for n in model.graph.node):
        return True
    # training-mode dropout draws a mask; with ratio 0 it is the identity, which is compared
    return name.startswith("test_training_dropout") and "zero_ratio" not in name


def _to_numpy(v: Any) -> Any:
    if isinstance(v, Tensor):
        return v.numpy()
    if isinstance(v, list):
        return [_to_numpy(x) for x in v]
    return v


def assert_matches(got: Any, want: Any, what: str, shape_only: bool = False) -> None:
    if isinstance(want, list):
        assert isinstance(got, list), f"{what}: expected a sequence, got {type(got).__name__}"
        assert len(got) == len(want), f"{what}: sequence of {len(got)}, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_matches(g, w, f"{what}[{i}]", shape_only)
        return
    if want is None:
        assert got is None, f"{what}: expected an empty optional"
        return
    want, got = np.asarray(want), np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if shape_only:
        return
    if want.dtype.kind in "OUS":
        assert (got.astype(str) == want.astype(str)).all(), f"{what}: {got} != {want}"
        return
    name = want.dtype.name
    if name not in _NATIVE:  # ml_dtypes (bfloat16, the 8/4/2-bit types): compare the values
        want = want.astype(np.int64 if "int" in name else np.float32)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    rtol, atol = {"float16": (5e-3, 5e-3), "bfloat16": (2e-2, 2e-2)}.get(name, (1e-3, 1e-4))
    if "float8" in name or "float4" in name:
        rtol, atol = 0.0, 0.0  # values of an 8- or 4-bit format are exact
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, err_msg=what)


def _load(case_dir: Path) -> OnnxRunner:
    try:
        return OnnxRunner(case_dir / "model.onnx")
    except NotImplementedError as e:
        pytest.skip(f"unsupported: {e}")
    except DeviceDTypeError as e:
        pytest.skip(f"device dtype: {e}")


@pytest.mark.parametrize("case", CASES)
def test_node(case: str, request: pytest.FixtureRequest) -> None:
    if case in KNOWN_WRONG:
        request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[case]))
    folder = DATA / case
    runner = _load(folder)
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    g = model.graph
    inits = {i.name for i in g.initializer}
    inputs = [i for i in g.input if i.name not in inits]
    shape_only = _is_random(model, case)
    for ds in sorted(folder.glob("test_data_set_*")):
        feed = {}
        for j, info in enumerate(inputs):
            path = ds / f"input_{j}.pb"
            if path.exists():
                feed[info.name] = read_value(onnx, path, info.type)
        want = [read_value(onnx, ds / f"output_{j}.pb", o.type) for j, o in enumerate(g.output)]
        try:
            out = runner(feed)
        except NotImplementedError as e:
            pytest.skip(f"unsupported: {e}")
        except DeviceDTypeError as e:
            pytest.skip(f"device dtype: {e}")
        for o, w in zip(g.output, want):
            assert_matches(_to_numpy(out[o.name]), w, f"{case} output {o.name!r} ({ds.name})", shape_only)


def test_case_ids_are_unique() -> None:
    # a guard for the parametrization above: the folder names are the test ids
    assert len(CASES) == len(set(CASES)) and all(re.fullmatch(r"test_\w+", c) for c in CASES)
