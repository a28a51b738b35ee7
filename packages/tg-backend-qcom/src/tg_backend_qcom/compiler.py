"""OpenCL C -> a QCOM library: the device binary from the OpenCL compiler, preceded by which kernel arguments
are image views. The launcher needs that list to wrap buffers, and putting it into the library (rather than
keeping it beside the source) means a binary from the compile cache carries it too."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyopencl as cl
from tg_backend_opencl.compiler import CLCompiler

from tg_backend_qcom.renderer import image_args

LIB_MAGIC = b"tg-qcom-lib 1\n"


@dataclass(frozen=True)
class QCOMLibrary:
    binary: bytes  # what the OpenCL compiler built
    image_args: dict[int, str]  # kernel argument position -> image channel type (pyopencl.channel_type name)

    def pack(self) -> bytes:
        meta = json.dumps({"image_args": {str(k): v for k, v in sorted(self.image_args.items())}})
        return LIB_MAGIC + meta.encode() + b"\n" + self.binary

    @staticmethod
    def unpack(lib: bytes) -> QCOMLibrary:
        if not lib.startswith(LIB_MAGIC):
            raise ValueError("not a QCOM library (it lacks the tg-qcom header): it was built by another compiler; "
                             "clear the compile cache or build it with QCOMCompiler")
        meta, _, binary = lib[len(LIB_MAGIC):].partition(b"\n")
        args = json.loads(meta)["image_args"]
        return QCOMLibrary(binary, {int(k): str(v) for k, v in args.items()})


class QCOMCompiler(CLCompiler):
    cache_key: str

    def __init__(self, context: cl.Context, device: cl.Device):
        super().__init__(context, device)
        # another library layout must never be read from the cache as this one
        self.cache_key = f"qcom|{LIB_MAGIC.decode().strip()}|{self.cache_key}"

    def compile(self, src: str) -> bytes:
        return QCOMLibrary(super().compile(src), image_args(src)).pack()

    def disassemble(self, lib: bytes, src: str) -> str | None:
        return super().disassemble(QCOMLibrary.unpack(lib).binary, src)  # the driver's binary, not our header
