"""Adreno's OpenCL C: the OpenCL renderer plus image-texture reads of read-only float buffers.

Adreno GPUs read through the texture path (its own cache, filtering hardware, better latency on scattered
reads) only what a kernel declares as an image. So a kernel's read-only float32/float16 buffers - weights,
mostly - are taken as `image1d_buffer_t` views of the very same memory: the device wraps the buffer at launch
(clCreateImage with CL_MEM_OBJECT_IMAGE1D_BUFFER, RGBA channels), and the kernel reads element i as component
i%4 of texel i//4 with `read_imagef` (`read_imageh` with native half). Nothing is copied or re-laid out, so the
compiler's index arithmetic is unchanged, and a buffer is an image in one kernel and a buffer in the next.
An aligned 4-wide vector load (an UPCAST the compiler vectorises) of an image is a single texel read.

A buffer stays a plain `__global` pointer when it is written by the kernel, of another dtype, of a symbolic
size, or too long for the device's image width limit. `images=False` (env IMAGE=0) turns the texture path off
entirely.

The renderer tells the compiler which kernel arguments are images in one comment line (IMAGE_ARGS_MARK), which
`image_args` parses back: the compiled binary carries that list, so a cached binary knows it too. Which buffers a
kernel reads as images is its plan (`QCOMRenderer.plan`, an `Images`), decided before the walk and read by the
hooks from the kernel being rendered: the renderer itself keeps no per-kernel state, so threads may share it.

float16 is native where the device has `cl_khr_fp16` (Adreno does: `half` variables, `#pragma OPENCL EXTENSION
cl_khr_fp16 : enable`), else emulated by the OpenCL renderer (vload_half/vstore_half, float arithmetic).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from tg_backend_opencl.renderer import OpenCLRenderer
from tinygrad.dtype import DType, dtypes
from tinygrad.renderer.cstyle import CKernel
from tinygrad.uop.ops import Ops, UOp

#: elements per texel: RGBA
TEXEL_ELEMENTS = 4
#: OpenCL image channel types of the views, by element dtype (names of pyopencl.channel_type members)
CHANNEL_TYPES: dict[DType, str] = {dtypes.float32: "FLOAT", dtypes.float16: "HALF_FLOAT"}
IMAGE_ARGS_MARK = "/* tg-qcom image arguments (position:channel type):"

_IMAGE_READ = """inline {ret} {name}(read_only image1d_buffer_t img, int i) {{
  {vec} t = {read}(img, i >> 2);  /* element i is component i%4 of texel i/4 */
  int c = i & 3;
  return c == 0 ? t.x : c == 1 ? t.y : c == 2 ? t.z : t.w;
}}
"""
IMAGE_READ_FN = {dtypes.float32: "tg_image_f32", dtypes.float16: "tg_image_f16"}


def texels_for(elements: int) -> int:
    """RGBA texels that hold `elements` values (the last texel may be partly padding)."""
    return -(-elements // TEXEL_ELEMENTS)


def image_args(src: str) -> dict[int, str]:
    """{kernel argument position: channel type} as the renderer wrote it into `src`; {} for none."""
    for line in src.splitlines():
        if line.startswith(IMAGE_ARGS_MARK):
            body = line[len(IMAGE_ARGS_MARK):].removesuffix("*/").split()
            return {int(pos): ctype for pos, ctype in (item.split(":") for item in body)}
    return {}


@dataclass(frozen=True)
class Images:
    """A kernel's plan on QCOM: the buffers it reads through images (`QCOMRenderer.image_params`)."""

    #: PARAM slot -> element dtype
    slots: dict[int, DType]
    #: the same by parameter name (`data<slot>`), as the load hooks name the buffers
    names: dict[str, DType]

    @staticmethod
    def of(slots: dict[int, DType]) -> Images:
        return Images(slots, {f"data{slot}": d for slot, d in slots.items()})


def _images(k: CKernel) -> Images:
    if not isinstance(k.plan, Images):
        raise TypeError(f"kernel {k.name} was not planned by a QCOMRenderer (its plan is {type(k.plan).__name__})")
    return k.plan


class QCOMRenderer(OpenCLRenderer):
    device = "QCOM"

    def __init__(self, extensions: frozenset[str] = frozenset(), image_dtypes: frozenset[DType] = frozenset(),
                 image_max_texels: int = 0):
        """`image_dtypes`: the element dtypes read through images (those whose RGBA format the device supports;
        empty turns images off). `image_max_texels`: the device's CL_DEVICE_IMAGE_MAX_BUFFER_SIZE."""
        super().__init__(extensions)
        self.image_dtypes = frozenset(d for d in image_dtypes if d in CHANNEL_TYPES)
        self.image_max_texels = image_max_texels

    @property
    def uses_images(self) -> bool:
        return bool(self.image_dtypes) and self.image_max_texels > 0

    def image_params(self, program: list[UOp]) -> dict[int, DType]:
        """PARAM index -> dtype for the buffers this kernel reads through images: read only (every use is an
        INDEX that is only LOADed, one element at a time), float32/float16, of a size the image width allows."""
        if not self.uses_images:
            return {}
        users: dict[UOp, list[UOp]] = defaultdict(list)
        for u in program:
            for s in u.src:
                users[s].append(u)
        out: dict[int, DType] = {}
        for p in program:
            if p.op is not Ops.PARAM or p.dtype.scalar not in self.image_dtypes or p.dtype.vcount != 1:
                continue
            size = p.arg.size
            if not isinstance(size, int) or not 0 < texels_for(size) <= self.image_max_texels:
                continue
            uses = users[p]
            read_only = bool(uses) and all(
                idx.op is Ops.INDEX and idx.src[0] is p and users[idx] and
                all(ld.op is Ops.LOAD and ld.dtype.vcount == 1 for ld in users[idx]) for idx in uses)
            if read_only:
                out[p.arg.slot] = p.dtype.scalar
        return out

    def plan(self, program: list[UOp]) -> Images:
        return Images.of(self.image_params(program))

    def render_source(self, k: CKernel, params: list[str], var_params: list[str]) -> str:
        """OpenCL's kernel, with the image read helpers and the image argument list before the kernel function."""
        src = super().render_source(k, params, var_params)
        images = _images(k).slots
        if not images:
            return src
        order = sorted(u.arg.slot for u in k.program if u.op is Ops.PARAM)  # kernel argument order
        mark = IMAGE_ARGS_MARK + "".join(f" {order.index(i)}:{CHANNEL_TYPES[d]}" for i, d in sorted(images.items()))
        helpers = "".join(self._image_read_fn(d) for d in sorted(set(images.values()), key=lambda d: d.name))
        at = src.index(f"{self.kernel_prefix}void ")  # after the pragmas and the half/bf16 helpers
        return src[:at] + helpers + mark + " */\n" + src[at:]

    def _image_read_fn(self, d: DType) -> str:
        if d == dtypes.float16 and not self.emulate_half:
            return _IMAGE_READ.format(ret="half", name=IMAGE_READ_FN[d], vec="half4", read="read_imageh")
        # float32, and float16 without cl_khr_fp16: a HALF_FLOAT image read with read_imagef gives floats
        return _IMAGE_READ.format(ret="float", name=IMAGE_READ_FN[d], vec="float4", read="read_imagef")

    def render_param(self, k: CKernel, index: int, d: DType, is_output: bool) -> str:
        if index in _images(k).slots:
            return f"read_only image1d_buffer_t data{index}"
        return super().render_param(k, index, d, is_output)

    def render_vector_load(self, k: CKernel, buf: str, idx: str, width: int, d: DType) -> str:
        """An aligned vector load (the compiler proves idx is a multiple of width) of an image is whole texels:
        one texel read for 4 lanes - the access Adreno's texture path is built for."""
        if (element := _images(k).names.get(buf)) is None:
            return super().render_vector_load(k, buf, idx, width, d)
        if width % TEXEL_ELEMENTS == 0:
            read = "read_imageh" if element == dtypes.float16 and not self.emulate_half else "read_imagef"
            texels = [f"{read}({buf}, (((int)({idx}))>>2)+{t})" for t in range(width // TEXEL_ELEMENTS)]
        else:  # a narrower vector: element by element
            texels = [f"{IMAGE_READ_FN[element]}({buf}, ((int)({idx}))+{lane})" for lane in range(width)]
        return texels[0] if len(texels) == 1 else f"(({self.vector_type(d, width)})({', '.join(texels)}))"

    def render_load(self, k: CKernel, buf: str, idx: str, gate: str | None, d: DType) -> str:
        if (element := _images(k).names.get(buf)) is None:
            return super().render_load(k, buf, idx, gate, d)
        val = f"{IMAGE_READ_FN[element]}({buf}, (int)({idx}))"
        return val if gate is None else f"({gate}?{val}:{self.render_const(0, d)})"

