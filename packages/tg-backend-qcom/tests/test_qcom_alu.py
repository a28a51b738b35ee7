"""The OpenCL backend's ALU, CAST and BITCAST tables (its helpers, loaded from its test file) run on QCOM. The
inputs of these kernels are read-only, so with the texture path on (the default where the device has images)
every float32/float16 operand - NaN, infinities, -0.0, subnormals included - is read through an image."""

from __future__ import annotations

import pytest
from cl_helpers import cl_alu
from tinygrad.dtype import DType, dtypes
from tinygrad.uop.ops import Ops, UOp

alu = cl_alu()
IMAGE_DTYPES = (dtypes.float32, dtypes.float16)
ALU_CASES = [(op, d) for d in dtypes.all() for op in alu.BINARY[alu.kind(d)] + alu.UNARY[alu.kind(d)]]


@pytest.mark.parametrize("op,d", ALU_CASES, ids=[f"{op.name}-{d.name}" for op, d in ALU_CASES])
def test_alu_matches_reference(qcom_device, op: Ops, d: DType) -> None:  # type: ignore[no-untyped-def]
    alu._require(qcom_device, d)
    got, xs, ys = alu.results(d, "QCOM")[op]
    binary = op in alu.BINARY[alu.kind(d)]
    out_d = dtypes.bool if op in alu.COMPARE else d
    want = [alu.exec_alu(op, out_d, (a, b) if binary else (a,), d) for a, b in zip(xs, ys)]
    alu.check(got, want, out_d, alu.ULPS.get(op, 0) if d.is_float else 0,
              lambda i: f"{op.name}({xs[i]!r}{', ' + repr(ys[i]) if binary else ''})")


def test_the_float_inputs_were_read_through_images(qcom_device) -> None:  # type: ignore[no-untyped-def]
    if not qcom_device.images_enabled:
        pytest.skip("the texture path is off on this device (IMAGE=0 or no image support)")
    n = 4
    x = UOp(Ops.PARAM, dtypes.float32, (), (1, n)).reshape((n,))
    sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (UOp(Ops.PARAM, dtypes.float32, (), (0, n)).reshape(
        (n,)), UOp(Ops.SQRT, dtypes.float32, (x,)))),))
    assert "read_only image1d_buffer_t data1" in qcom_device.get_runner(sink).spec.src


CASTS = [(a, b) for a in IMAGE_DTYPES for b in dtypes.all() if a != b]


@pytest.mark.parametrize("frm,to", CASTS, ids=[f"{a.name}-{b.name}" for a, b in CASTS])
def test_cast_of_image_read_values_matches_reference(qcom_device, frm: DType, to: DType) -> None:  # type: ignore[no-untyped-def]
    import math

    alu._require(qcom_device, frm, to)
    vals = alu.edges(frm)
    if to.is_int:  # float -> int is defined only where the value fits (C and OpenCL alike)
        vals = [v for v in vals if math.isfinite(v) and to.min <= math.trunc(v) <= to.max]
    x = UOp(Ops.PARAM, frm, (), (1, len(vals)))
    (got,) = alu.run([(frm, vals)], [(to, x.cast(to))], "QCOM")
    alu.check(got, [alu.exec_cast(v, to) for v in vals], to, 0, lambda i: f"cast({vals[i]!r})")


BITCASTS = [(a, b) for a in IMAGE_DTYPES for b in dtypes.all() if a != b and a.itemsize == b.itemsize]


@pytest.mark.parametrize("frm,to", BITCASTS, ids=[f"{a.name}-{b.name}" for a, b in BITCASTS])
def test_bitcast_of_image_read_values_matches_reference(qcom_device, frm: DType, to: DType) -> None:  # type: ignore[no-untyped-def]
    alu._require(qcom_device, frm, to)
    vals = [v for v in alu.edges(frm) if v == v]  # NaN payloads are not the texture path's to keep
    x = UOp(Ops.PARAM, frm, (), (1, len(vals)))
    (got,) = alu.run([(frm, vals)], [(to, x.bitcast(to))], "QCOM")
    want = [alu.exec_bitcast(v, frm, to) for v in vals]
    if to.is_float:
        alu.check(got, want, to, 0, lambda i: f"bitcast({vals[i]!r})")
    else:
        assert alu.from_array(got, to) == want
