"""The renderer: write a linearized program as plain JSON data, one UOp per line.

A hardware backend's renderer writes source code for its target (C, PTX, WGSL, ...). This one writes
the program itself, as data, for the interpreter in `tg_backend_pyref.interpreter`:

    {"format": "tg-pyref-program", "version": 1, "name": "E_4",
     "uops": [
      {"i": 0, "op": "CONST", "dtype": "int32", "src": [], "arg": 4},
      {"i": 1, "op": "RANGE", "dtype": "int32", "src": [0], "arg": [0, "global"]},
      ...
     ]}

`src` holds positions of earlier UOps in the list. Arguments are JSON values; a float is written as
`{"float": "<float.hex()>"}` so that every bit survives (-0.0, NaN, infinities, the last ulp), and an
`Ops` member as `{"op": "ADD"}`. Nothing here is pickled or executed: the format is data only.
"""

from __future__ import annotations

import json
from typing import Any

from tinygrad.dtype import DType
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import Ops, RangeArg, UOp

FORMAT_NAME = "tg-pyref-program"
FORMAT_VERSION = 1


def encode_arg(arg: Any, where: str) -> Any:
    """A UOp argument as a JSON value (see the module docstring); `where` names the UOp for errors."""
    if arg is None or isinstance(arg, (bool, int, str)):
        return arg
    if isinstance(arg, float):
        return {"float": arg.hex()}
    if isinstance(arg, Ops):
        return {"op": arg.name}
    if isinstance(arg, DType):
        return {"dtype": arg.name}
    if isinstance(arg, RangeArg):  # [axis, kind name]: the interpreter needs neither, but a reader does
        return [arg.axis, arg.kind.value]
    if isinstance(arg, (tuple, list)):
        return [encode_arg(a, where) for a in arg]
    raise NotImplementedError(f"the PYREF renderer cannot serialise the argument {arg!r} "
                              f"({type(arg).__name__}) of {where}")


class PyRefRenderer(Renderer):
    device = "PYREF"
    has_local = False  # the interpreter runs every RANGE as a loop; there are no work-item ids

    def render(self, name: str, program: list[UOp]) -> str:
        # the linearizer may emit one (hash-consed) UOp twice, e.g. again after the loop that computed it
        # closed; a source always means its latest emission before the user
        position: dict[UOp, int] = {}
        lines = []
        for i, u in enumerate(program):
            if u.dtype.vcount != 1:
                raise NotImplementedError(f"the PYREF renderer has no vector types; UOp {i} ({u.op.name}) is {u.dtype}")
            src = []
            for s in u.src:
                if s not in position:
                    raise ValueError(f"kernel {name}: UOp {i} ({u.op.name}) uses a {s.op.name} that was not emitted "
                                     "before it; the linearized program is out of order")
                src.append(position[s])
            entry = {"i": i, "op": u.op.name, "dtype": u.dtype.name, "src": src,
                     "arg": encode_arg(u.arg, f"UOp {i} ({u.op.name}) of kernel {name}")}
            lines.append("  " + json.dumps(entry, allow_nan=False))
            position[u] = i
        header = json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION, "name": name})
        return header[:-1] + ',\n "uops": [\n' + ",\n".join(lines) + "\n ]}\n"
