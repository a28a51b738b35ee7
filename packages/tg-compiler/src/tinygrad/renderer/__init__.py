"""Renderers turn a linearized program (a list of UOps) into source code for one target.

`Renderer` is the backend's part of the device contract: it names the ALU ops it can write
(`supported_ops`) and the dtypes it supports; the compiler decomposes any other op into those before rendering
(`tinygrad/codegen/decompose.py`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from tinygrad.device import DeviceKnobs
from tinygrad.dtype import DType, DTypeSet, dtypes
from tinygrad.renderer.tensor_core import TensorCore
from tinygrad.uop.ops import AxisKind, GroupOp, Ops, UOp

if TYPE_CHECKING:
    from tinygrad.codegen.opt.actions import OptState
    from tinygrad.uop.rewrite import PatternMatcher


class Renderer:
    device: str = ""
    #: dtypes this target can hold in memory and compute with (directly or by emulation in the renderer)
    supported_dtypes: frozenset[DType] = DTypeSet(dtypes.all())
    #: ALU ops this target writes itself; the decomposition pass rewrites every other ALU op into these before
    #: rendering (or refuses the kernel, naming the op). The default is every op, so nothing is rewritten
    supported_ops: frozenset[Ops] = GroupOp.ALU
    #: GPU-style targets run output loops as work-items (the SPECIALs of `tinygrad.codegen.work_items`);
    #: CPU-style ones loop
    has_local: bool = False
    #: whether the runtime, when a kernel leaves the work-group size to it, may launch more work-items than the
    #: global size asks (it picks the work-group size and launches whole ones): every work-item id is guarded then
    launch_rounds_up: bool = False
    #: launch limits of a `has_local` target, per launch dimension (dimension 0 first): the most work-items in
    #: a launch and in one work-group, and the work-group's total size; None/0 where the target sets no limit
    global_max: tuple[int, ...] | None = None
    local_max: tuple[int, ...] | None = None
    max_work_group_size: int = 0
    #: the work-group size the heuristics give a launch of one dimension (within max_work_group_size)
    flat_work_group: int = 256
    #: bytes of local (work-group shared) memory; 0: no local memory, so the compiler never emits DEFINE_LOCAL,
    #: BARRIER or the GROUP optimisation for this target
    local_mem_max: int = 0
    #: vector widths the target can load and store in one access (e.g. (4,) for float4); () keeps every access
    #: scalar, which every target can render
    vector_widths: tuple[int, ...] = ()
    #: the integer type of index arithmetic that leaves int32's range (`tinygrad.codegen.index_dtype`); None for a
    #: target without 64-bit integers, which then refuses such kernels with a clear error
    index_wide_dtype: DType | None = dtypes.int64
    #: ---- device knobs (`DeviceKnobs`, read through `knobs` by the hand-coded heuristics and, through the device,
    #: by core's layout pass, engine/layout.py: convolution operands and matmul packing). The defaults are what the
    #: CPU heuristics were measured with (a core of Zen 4: 1 MiB of L2, 32 AVX-512 registers of 64 bytes);
    #: GPU-style targets keep them for core's layouts (the conv gradient's, the matmul's), which they have always
    #: been given.
    #: bytes of one core's L2: cache-blocked kernels and the conv weight gradient's batch chunks take half of it, a
    #: matmul's B of at least all of it is packed into panels
    l2_cache_bytes: int = 1 << 20
    #: bytes of one SIMD register: a CPU register tile is two registers of float32 wide
    simd_bytes: int = 64
    #: SIMD registers: a CPU register tile grows to a quarter of them and stops at half
    vector_registers: int = 32
    #: input channels from which a convolution's weight gradient makes channels-last copies; 0: never
    channels_last_min: int = 8
    #: whether a padded convolution reads a copy of its input with its zero border written out
    #: (`DeviceKnobs.conv_border_copy`); off by default
    conv_border_copy: bool = False
    #: whether a convolution with a window whose output rows leave part of a register empty reads a channels-last
    #: weight and tiles its output channels (`DeviceKnobs.uneven_rows_channels_last`); off by default
    uneven_rows_channels_last: bool = False
    #: rewrites of the kernel graph that this target's compiler prefers, run (with the renderer as ctx) after the
    #: decomposition and before linearizing; each must keep the reference semantics exactly. None: no such pass
    target_rewrites: PatternMatcher | None = None
    #: the matrix instructions the renderer can write (its WMMA rendering), which the TC opt may use
    #: (`tinygrad.renderer.tensor_core`); none by default
    tensor_cores: tuple[TensorCore, ...] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # a subclass's plain frozenset becomes a DTypeSet, so tinygrad's call spelling works on every renderer
        if type(cls.__dict__.get("supported_dtypes")) is frozenset:
            cls.supported_dtypes = DTypeSet(cls.supported_dtypes)

    @property
    def knobs(self) -> DeviceKnobs:
        return DeviceKnobs(self.l2_cache_bytes, self.simd_bytes, self.vector_registers, self.channels_last_min,
                           self.conv_border_copy, self.uneven_rows_channels_last)

    def supports_dtype(self, dtype: DType) -> bool:
        return dtype.scalar in self.supported_dtypes

    def opt_rules(self, state: OptState) -> OptState | None:
        """This target's own choice of opts for a kernel of constant shape, what it gets without BEAM: a backend's
        tuning rules, kept in its package and built on the helpers of `tinygrad.codegen.opt.heuristics` (the
        CPU's: `tg_backend_cpu.opt_rules`). None leaves the kernel to the generic rules there."""
        return None

    def render(self, name: str, program: list[UOp]) -> str:
        raise NotImplementedError

    @staticmethod
    def kernel_name(sink: UOp) -> str:
        """A readable name: r_ for kernels with a reduction, E_ for elementwise, then the loop sizes."""
        ranges = sorted((u for u in sink.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg.axis)
        prefix = "r" if any(r.arg.kind is AxisKind.REDUCE for r in ranges) else "E"
        sizes = "_".join(_size_name(r.src[0]) for r in ranges) or "1"
        return f"{prefix}_{sizes}"


def _size_name(size: UOp) -> str:
    if size.op is Ops.CONST:
        return str(size.arg)
    if size.op is Ops.DEFINE_VAR:
        return str(size.arg.name)
    return "s"  # a symbolic expression


def loop_depths_and_users(program: list[UOp]) -> tuple[dict[UOp, int], dict[UOp, list[UOp]]]:
    """For a renderer's walk: each UOp's block nesting depth (loops and IFs; 1 outside every block, for
    indentation) and the UOps that use each one (a value with one user can be inlined into it)."""
    depth_of: dict[UOp, int] = {}
    users: dict[UOp, list[UOp]] = defaultdict(list)
    depth = 1
    for u in program:
        if u.op in (Ops.END, Ops.ENDIF):
            depth -= 1
        depth_of[u] = depth
        if u.op in (Ops.RANGE, Ops.IF):
            depth += 1
        for s in u.src:
            users[s].append(u)
    return depth_of, users
