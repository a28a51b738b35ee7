"""The TC optimisation run for real, here, where no GPU has tensor cores: an OpenCL renderer that *emulates* each
tensor core of `tinygrad.renderer.tensor_core` with local memory (every lane writes its fragments where the
layout says they belong in the tile, a barrier, every lane computes its elements of C from the whole tile) runs
matmuls through the whole pipeline on PoCL. This checks what the optimisation does with a layout - which lane
loads which elements, the loops over tiles, where each lane's results are stored, the epilogue, the launch -
against numpy for every tensor core the GPU renderers list; that the layouts are the hardware's is what the
vendors document and `run_h200.sh` checks on a real GPU."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("tg_backend_opencl", reason="tg-backend-opencl is not installed")

from tg_backend_opencl.renderer import OpenCLRenderer
from tinygrad import Tensor, dtypes
from tinygrad.codegen import get_program
from tinygrad.codegen.opt import Opt, OptOps
from tinygrad.renderer.cstyle import CKernel, tensor_core
from tinygrad.renderer.tensor_core import (
    TensorCore,
    cdna3_mfma,
    lane_coordinates,
    mma_m16n8k16,
    rdna3_wmma,
    simdgroup_8x8,
    tile_offset,
)
from tinygrad.uop.ops import Ops, UOp

TENSOR_CORES = {"mma": mma_m16n8k16, "wmma": rdna3_wmma, "mfma": cdna3_mfma, "simdgroup": simdgroup_8x8}


class EmulatedTensorCores(OpenCLRenderer):
    """OpenCL with the tensor cores of `tensor_cores` emulated through local memory, a tile per warp."""

    def __init__(self, base: OpenCLRenderer, tensor_cores: tuple[TensorCore, ...]):
        super().__init__(base.extensions, base.local_max, base.max_work_group_size, base.local_mem_max)
        self.tensor_cores = tensor_cores
        self.render_rules = {**OpenCLRenderer.render_rules, Ops.WMMA: self._wmma}

    def _wmma(self, r: EmulatedTensorCores, k: CKernel, u: UOp) -> None:
        """The WMMA entry: the tiles' local arrays where a tensor core is first used, then its lines."""
        if u.arg not in k.seen:
            k.seen.add(u.arg)
            k.local_decls.extend(self.render_wmma_scratch(u.arg))
        tensor_core(EmulatedTensorCores.render_wmma)(r, k, u)

    def _scratch(self, tc: TensorCore) -> tuple[str, str, int]:
        """The names of the local arrays holding each warp's A and B tiles, and how many warps a group may have."""
        return f"tc_a{self.tensor_cores.index(tc)}", f"tc_b{self.tensor_cores.index(tc)}", \
            self.max_work_group_size // tc.threads

    def render_wmma_scratch(self, tc: TensorCore) -> list[str]:
        m, n, k = tc.dims
        a, b, warps = self._scratch(tc)
        return [f"__local float {a}[{warps * m * k}];", f"__local float {b}[{warps * k * n}];"]

    def render_wmma(self, tc: TensorCore, lane: str, a: list[str], b: list[str], out: list[str]) -> list[str]:
        m, n, k = tc.dims
        ta, tb, _ = self._scratch(tc)
        warp = "(get_local_id(1)+get_local_size(1)*get_local_id(2))"  # lanes are launch dimension 0
        lines = ["{", f"  __local float* ta = {ta}+{warp}*{m * k};", f"  __local float* tb = {tb}+{warp}*{k * n};",
                 "  barrier(CLK_LOCAL_MEM_FENCE);"]  # the previous tile's readers are done
        lines += [f"  ta[{tile_offset(tc.layout_a, lane, i, k)}] = {v};" for i, v in enumerate(a)]
        lines += [f"  tb[{tile_offset(tc.layout_b, lane, i, n)}] = {v};" for i, v in enumerate(b)]
        lines.append("  barrier(CLK_LOCAL_MEM_FENCE);")
        for i, o in enumerate(out):
            row, col = lane_coordinates(tc.layout_c, lane, i)
            lines.append(f"  {o} = 0.0f; for (int kk = 0; kk < {k}; kk++) {o} += ta[{row}*{k}+kk]*tb[kk*{n}+{col}];")
        return lines + ["}"]


@pytest.fixture
def emulated(cl_device: Any, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """use(*tensor_cores, opts=None): CL renders with those tensor cores emulated (and exactly `opts`, if given,
    else the heuristics' choice) until the test ends; returns the list of ProgramSpecs compiled from then on."""
    def use(*tensor_cores: TensorCore, opts: tuple[Opt, ...] | None = None) -> list[Any]:
        renderer = EmulatedTensorCores(cl_device.renderer, tensor_cores)
        specs: list[Any] = []

        def program(ast: Any) -> Any:
            specs.append(get_program(ast, renderer, opts))
            return specs[-1]
        monkeypatch.setattr(cl_device, "renderer", renderer)
        monkeypatch.setattr(cl_device, "_program", program)
        monkeypatch.setattr(cl_device, "_runners", {})
        return specs
    return use


def _data(shape: tuple[int, ...], dtype: Any, seed: int) -> tuple[Tensor, np.ndarray]:
    """A CL tensor of `dtype` and its values as float32 (what the tensor holds exactly)."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    t = Tensor(x, device="CL").cast(dtype).realize()
    return t, t.cast(dtypes.float32).numpy()


def _used_tc(specs: list[Any]) -> bool:
    return any(any(o.startswith("TC(") for o in s.applied_opts) for s in specs)


@pytest.mark.parametrize("name", sorted(TENSOR_CORES))
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=["f16", "bf16"])
def test_layouts_cover_their_tiles(name: str, dtype: Any) -> None:
    TENSOR_CORES[name](dtype).check_layouts()


@pytest.mark.parametrize("name", sorted(TENSOR_CORES))
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("shape", [(64, 48, 32), (32, 32, 64), (16, 16, 16), (96, 80, 48)],
                         ids=lambda s: "x".join(map(str, s)))
def test_matmul_on_emulated_tensor_cores(emulated: Any, name: str, dtype: Any, shape: tuple[int, int, int]) -> None:
    """The heuristics choose TC for a matmul of float16 or bfloat16 (and more opts after it): numpy's result."""
    tc = TENSOR_CORES[name](dtype)
    m, n, k = shape
    a, an = _data((m, k), dtype, 0)
    b, bn = _data((k, n), dtype, 1)
    specs = emulated(tc)
    out = a.dot(b, dtype=dtypes.float32).numpy()
    assert _used_tc(specs), [s.applied_opts for s in specs]
    np.testing.assert_allclose(out, an @ bn, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", sorted(TENSOR_CORES))
def test_epilogue_batch_and_half_output(emulated: Any, name: str) -> None:
    """A batched matmul of halves to a half result with a bias and relu after the sum: the epilogue is applied to
    each lane's elements where the layout of C puts them."""
    tc = TENSOR_CORES[name](dtypes.float16)
    a, an = _data((3, 32, 48), dtypes.float16, 2)
    b, bn = _data((3, 48, 16), dtypes.float16, 3)
    bias, biasn = _data((16,), dtypes.float16, 4)
    specs = emulated(tc)
    out = ((a @ b) + bias).relu().numpy()
    assert out.dtype == np.float16 and _used_tc(specs)
    np.testing.assert_allclose(out.astype(np.float32), np.maximum(an @ bn + biasn, 0), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("name", sorted(TENSOR_CORES))
def test_convolution_reduces_its_window_around_the_tiles(emulated: Any, name: str) -> None:
    """A half convolution: K is the input channels, the kernel window stays loops around the tensor core."""
    tc = TENSOR_CORES[name](dtypes.float16)
    x, xn = _data((1, 16, 18, 18), dtypes.float16, 5)
    w, wn = _data((16, 16, 3, 3), dtypes.float16, 6)
    specs = emulated(tc)
    out = x.conv2d(w, dtype=dtypes.float32).numpy()
    ref = np.zeros((1, 16, 16, 16), np.float32)
    for ky in range(3):
        for kx in range(3):
            ref += np.einsum("nchw,oc->nohw", xn[:, :, ky:ky + 16, kx:kx + 16], wn[:, :, ky, kx])
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-3)
    assert _used_tc(specs), [s.applied_opts for s in specs]


@pytest.mark.parametrize("opts", [
    (Opt(OptOps.TC, 0, 0),),
    (Opt(OptOps.TC, 0, 0), Opt(OptOps.UNROLL, 3, 2)),
    (Opt(OptOps.TC, 0, 0), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 3)),
    (Opt(OptOps.TC, 1, 0), Opt(OptOps.LOCAL, 0, 2)),
], ids=str)
def test_opts_after_tc(emulated: Any, opts: tuple[Opt, ...]) -> None:
    """What BEAM may combine with TC: unrolled k tiles, several tiles per warp, several warps per work-group, and
    the other choice of axes (A and B exchanged)."""
    tc = mma_m16n8k16(dtypes.float16)
    a, an = _data((64, 64), dtypes.float16, 7)
    b, bn = _data((64, 48), dtypes.float16, 8)
    specs = emulated(tc, opts=opts)
    out = a.dot(b, dtype=dtypes.float32).numpy()
    assert [s.applied_opts for s in specs] == [tuple(map(str, opts))]
    np.testing.assert_allclose(out, an @ bn, rtol=1e-5, atol=1e-4)


def test_what_tc_refuses(cl_device: Any) -> None:
    """Shapes that do not divide into tiles, float32 inputs, and TC after other opts are refused by name; the
    heuristics then optimise the kernel without it."""
    from tinygrad.codegen.lowerer import lower_kernel
    from tinygrad.codegen.opt import OptError, OptState, apply_opt

    renderer = EmulatedTensorCores(cl_device.renderer, (mma_m16n8k16(dtypes.float16),))
    cases = [(Tensor.empty(50, 32, dtype=dtypes.float16, device="CL"), Tensor.empty(32, 48, dtype=dtypes.float16,
                                                                                      device="CL")),
             (Tensor.empty(64, 32, device="CL"), Tensor.empty(32, 48, device="CL"))]
    for a, b in cases:
        (si,) = a.dot(b, dtype=dtypes.float32).schedule()
        state = OptState.from_lowered(lower_kernel(si.ast))
        with pytest.raises(OptError, match="sum of float16 products"):
            apply_opt(state, Opt(OptOps.TC, 0, 0), renderer)
        assert not _used_tc([get_program(si.ast, renderer)])
    (si,) = Tensor.empty(64, 32, dtype=dtypes.float16, device="CL").dot(
        Tensor.empty(32, 48, dtype=dtypes.float16, device="CL"), dtype=dtypes.float32).schedule()
    state = apply_opt(OptState.from_lowered(lower_kernel(si.ast)), Opt(OptOps.UPCAST, 0, 2), renderer)
    with pytest.raises(OptError, match="first opt"):
        apply_opt(state, Opt(OptOps.TC, 0, 0), renderer)
    state = apply_opt(OptState.from_lowered(lower_kernel(si.ast)), Opt(OptOps.TC, 0, 0), renderer)
    lane = len(state.axes) - 2  # the lanes: the last output axis, before k's tiles
    with pytest.raises(OptError, match="lanes of a tensor core"):
        apply_opt(state, Opt(OptOps.UPCAST, lane, 2), renderer)


def test_float32_on_a_float32_tensor_core(emulated: Any) -> None:
    """A tensor core whose input is float32 (Apple's simdgroup matrices) takes a float32 matmul without casts."""
    a, an = _data((40, 24), dtypes.float32, 9)
    b, bn = _data((24, 32), dtypes.float32, 10)
    specs = emulated(simdgroup_8x8(dtypes.float32))
    out = (a @ b).numpy()
    assert _used_tc(specs)
    np.testing.assert_allclose(out, an @ bn, rtol=1e-5, atol=1e-4)


def test_beam_starts_with_tensor_cores() -> None:
    """BEAM's first step tries TC on each listed tensor core (and two choices of axes); later steps do not."""
    from tinygrad.codegen.beam import candidate_actions
    from tinygrad.codegen.lowerer import lower_kernel
    from tinygrad.codegen.opt import OptState

    (si,) = Tensor.empty(64, 32, dtype=dtypes.float16, device="CPU").dot(
        Tensor.empty(32, 48, dtype=dtypes.float16, device="CPU"), dtype=dtypes.float32).schedule()
    state = OptState.from_lowered(lower_kernel(si.ast))
    tcs = [o for o in candidate_actions(state, True, 2) if o.op is OptOps.TC]
    assert tcs == [Opt(OptOps.TC, c, t) for t in range(2) for c in range(2)]
    assert not [o for o in candidate_actions(state, True, 0) if o.op is OptOps.TC]
    later = OptState(state.sink, applied=(Opt(OptOps.UPCAST, 0, 2),))
    assert not [o for o in candidate_actions(later, True, 2) if o.op is OptOps.TC]
