"""A plan (plan.py) as dependency-free C: one source file, its header and a weights file.

The kernels are the CPU backend's C kernels (tg_backend_cpu.renderer.CPURenderer), rendered from the captured
kernel ASTs with the knobs of the device that captured them: a capture made on the CPU's C path
(`CPU_COMPILER=clang` or `gcc`) gets the kernels it ran, text for text. Each kernel runs whole on the calling
thread (its slice arguments 0, 1, 1), so the program needs no thread library; the pool's entry points are left out.
Kernels are `static`, and everything else the file defines starts with the chosen prefix, so several exported
models link into one program.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import tempfile
from typing import Any

from tinygrad.dtype import DType, dtypes
from tinygrad.export.plan import Copy, ExportError, Kernel, Plan, Port
from tinygrad.uop.ops import Ops, UOp

#: the weights file: this magic, then format version, block count, payload size and layout fingerprint
WEIGHTS_MAGIC = b"TGWEIGHT"
WEIGHTS_VERSION = 1
HEADER = struct.Struct("<8sIIQQ")
ALIGN = 64  # each block (and each buffer of the C program) starts at a multiple of this

_C_TYPES = {
    dtypes.bool: "bool", dtypes.int8: "int8_t", dtypes.uint8: "uint8_t", dtypes.int16: "int16_t",
    dtypes.uint16: "uint16_t", dtypes.int32: "int32_t", dtypes.uint32: "uint32_t", dtypes.int64: "int64_t",
    dtypes.uint64: "uint64_t", dtypes.float32: "float", dtypes.float64: "double",
}


def c_type(d: DType) -> str:
    """The C element type a caller passes for a tensor of `d` (raw 16-bit words for half and bfloat16)."""
    return _C_TYPES.get(d, f"uint{d.itemsize * 8}_t")


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def write_atomic(path: str, data: bytes | str) -> None:
    """Write a file through a temporary one in its folder, renamed over it: a reader never sees half a file."""
    raw = data.encode() if isinstance(data, str) else data
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def layout(plan: Plan) -> tuple[list[int], int]:
    """Each storage's offset in the program's one block of memory, and that block's size.

    Inputs and weights (which hold state from run to run) get memory of their own. Scratch memory lives from the
    first step that touches it to the last (the outputs' to the end of the run), and two scratch buffers whose
    lives do not meet share memory: the intermediates of a deep model take the room of a few layers, not of all.
    Lives that meet at one step stay apart, so that no kernel's output is also one of its inputs."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, step in enumerate(plan.steps):
        for st in (step.storages if isinstance(step, Kernel) else (step.dest, step.src)):
            first.setdefault(st, i)
            last[st] = i
    for p in plan.outputs:
        last[p.storage] = len(plan.steps)
    offsets = [0] * len(plan.storages)
    at = 0
    for s in plan.storages:
        if s.kind != "scratch":
            offsets[s.index] = at
            at += align(max(s.nbytes, 1))
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first step, last step) of scratch placed so far
    scratch = sorted((s for s in plan.storages if s.kind == "scratch"), key=lambda s: (first.get(s.index, 0), s.index))
    end = at
    for s in scratch:
        lo, hi, size = first.get(s.index, 0), last.get(s.index, len(plan.steps)), align(max(s.nbytes, 1))
        busy = sorted((o, e) for o, e, f, la in placed if f <= hi and lo <= la)
        offset = at
        for o, e in busy:  # the lowest gap between the live ones that fits
            if offset + size <= o:
                break
            offset = max(offset, e)
        placed.append((offset, offset + size, lo, hi))
        offsets[s.index] = offset
        end = max(end, offset + size)
    return offsets, end


def weights_blob(plan: Plan) -> tuple[bytes, int]:
    """The weights file's bytes and its layout fingerprint (the blocks' sizes: a file for another export of
    another model, or another version of this one, is refused by its fingerprint or its size)."""
    weights = [s for s in plan.storages if s.kind == "weight"]
    sizes = ",".join(str(s.nbytes) for s in weights)
    fingerprint = int.from_bytes(hashlib.sha256(sizes.encode()).digest()[:8], "little")
    payload = bytearray()
    for s in weights:
        assert s.data is not None and len(s.data) == s.nbytes
        payload += s.data
        payload += bytes(align(len(payload)) - len(payload))
    head = HEADER.pack(WEIGHTS_MAGIC, WEIGHTS_VERSION, len(weights), len(payload), fingerprint)
    return head + bytes(payload), fingerprint


def _capture_renderer(device: str) -> Any:
    """A C renderer with the capturing device's knobs, when that device renders C for the CPU (the same kernels)."""
    try:
        from tg_backend_cpu import vector_math
        from tg_backend_cpu.renderer import CPURenderer
        from tinygrad.renderer.cstyle import CStyleRenderer
    except ImportError as e:
        raise ExportError(f"export_c renders the kernels with tg-backend-cpu's C renderer, which is not installed "
                          f"({e}); pip install tg-backend-cpu") from e

    class _Collect(CStyleRenderer):
        """Takes the kernel's function alone; its prelude and helpers are written once for the whole file."""

        def render_kernel(self, name: str, params: list[str], body: list[str], uses_bf16: bool = False,
                          helpers: str = "") -> str:
            ops: set[Any] = self.kernel_ops  # type: ignore[attr-defined]
            own = vector_math.c_helpers(ops)
            extra = helpers[len(own):] if helpers.startswith(own) else helpers
            self.helper_ops.update(ops)  # type: ignore[attr-defined]
            self.uses_bf16 = self.uses_bf16 or uses_bf16  # type: ignore[has-type]
            if extra and extra not in self.extra_helpers:  # type: ignore[attr-defined]
                self.extra_helpers.append(extra)  # type: ignore[attr-defined]
            return f"\nstatic void {name}({', '.join(params)}) {{\n" + "\n".join(body) + "\n}\n"

    class ExportRenderer(CPURenderer, _Collect):
        def __init__(self) -> None:
            super().__init__()
            self.helper_ops: set[Any] = set()
            self.uses_bf16 = False
            self.extra_helpers: list[str] = []
            self.names: set[str] = set()
            self.kernel_ops: set[Any] = set()
            self.var_bounds: dict[str, tuple[int, int]] = {}

        def kernel_name(self, sink: UOp) -> str:  # type: ignore[override]
            base = CPURenderer.kernel_name(sink)
            name, n = base, 1
            while name in self.names:
                name, n = f"{base}_{n}", n + 1
            self.names.add(name)
            return name

        def render(self, name: str, program: list[UOp]) -> str:
            for u in program:
                if u.op is Ops.DEFINE_VAR:
                    self.var_bounds[u.arg.name] = (int(u.arg.vmin), int(u.arg.vmax))
            # the vector-math helpers this kernel calls, which the C path puts first in its helpers
            self.kernel_ops = {u.op for u in program if vector_math.computes(u.op, u.dtype)}
            return str(super().render(name, program))

        def render_entry_points(self, name: str, program: list[UOp], plan: Any) -> str:
            return ""  # the thread pool's entry points: the exported program calls kernels directly

        def helpers_source(self) -> str:
            return (self.bf16_prelude if self.uses_bf16 else "") + vector_math.c_helpers(self.helper_ops) + \
                "".join(self.extra_helpers)

    r = ExportRenderer()
    try:
        from tinygrad.device import Device
        captured = getattr(Device[device], "renderer", None) if device else None
    except Exception:  # the capturing device is gone or not a compiled one: the C renderer's own knobs
        captured = None
    if isinstance(captured, CPURenderer):
        for k, v in vars(captured).items():
            setattr(r, k, v)
    return r


def render_c(plan: Plan, prefix: str = "net") -> tuple[str, str, bytes, dict]:
    """(source, header, weights file, manifest) of a plan."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", prefix):
        raise ExportError(f"prefix {prefix!r} is not a C identifier; use letters, digits and _ (not first a digit)")
    for p in (*plan.inputs, *plan.outputs):
        if p.dtype not in _C_TYPES and p.dtype.itemsize not in (1, 2, 4, 8):
            raise ExportError(f"dtype {p.dtype.name} of an input or output has no C type; cast it to float32")
    P, U = prefix, prefix.upper()
    renderer = _capture_renderer(plan.device)
    from tinygrad.codegen import get_program  # tg-compiler, which tg-backend-cpu depends on
    offsets, arena = layout(plan)
    sources: dict[UOp, Any] = {}
    calls: list[str] = []
    for step in plan.steps:
        if isinstance(step, Copy):
            if step.dest != step.src:
                calls.append(f"  memmove(M + {offsets[step.dest]}, M + {offsets[step.src]}, {step.nbytes});")
            continue
        assert isinstance(step, Kernel)
        spec = sources.get(step.ast)
        if spec is None:
            spec = sources[step.ast] = get_program(step.ast, renderer)
        args = [f"(void *)(M + {offsets[step.storages[slot]]})" for slot in spec.param_indices]
        missing = [v for v in spec.var_names if v not in plan.variables]
        if missing:
            raise ExportError(f"TinyJit function {plan.name}: kernel {spec.name} takes Variables {missing} that the "
                              f"capturing call did not bind; bind every Variable in the function's arguments")
        args += [f"{P}_vars[{list(plan.variables).index(v)}]" for v in spec.var_names]
        calls.append(f"  {spec.name}({', '.join([*args, '0', '1', '1'])});")
    blob, fingerprint = weights_blob(plan)
    var_source = _var_source(plan, renderer.var_bounds, P, U)
    weights = [s for s in plan.storages if s.kind == "weight"]
    n_kernels = sum(isinstance(s, Kernel) for s in plan.steps)
    table = ",\n".join(f"  {{{offsets[s.index]}ull, {s.nbytes}ull}}" for s in weights) or "  {0ull, 0ull}"
    ins = "\n".join(f"  memcpy(M + {offsets[p.storage]}, inputs[{i}], {p.nbytes});" for i, p in enumerate(plan.inputs))
    outs = "\n".join(f"  memcpy(outputs[{i}], M + {offsets[p.storage]}, {p.nbytes});"
                     for i, p in enumerate(plan.outputs))
    # math.h before the kernels' prelude, which renames its functions to the compilers' builtins
    source = f"""/* Generated by tinygrad.export from TinyJit function {plan.name}: {n_kernels} kernels,
   {len(weights)} weight buffers. Needs only libc and libm: cc -O2 -c {P}.c && cc {P}_main.c {P}.o -lm.
   The interface is in {P}.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "{P}.h"
#undef INFINITY
#undef NAN
#undef signbit
{renderer.prelude}{renderer.helpers_source()}{"".join(spec.src for spec in sources.values())}
#define {U}_ARENA_BYTES {arena}ull
#define {U}_N_WEIGHTS {len(weights)}u
#define {U}_PAYLOAD_BYTES {len(blob) - HEADER.size}ull
#define {U}_FINGERPRINT {fingerprint}ull
static const unsigned long long {P}_weights[][2] = {{ /* offset in memory, bytes */
{table}
}};
static unsigned char *{P}_raw = NULL, *{P}_memory = NULL;
{var_source}
static unsigned long long {P}_le(const unsigned char *p, int n) {{
  unsigned long long v = 0;
  for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}}

void {P}_free(void) {{
  free({P}_raw);
  {P}_raw = {P}_memory = NULL;
}}

int {P}_init(const char *weights_path) {{
  unsigned char head[{HEADER.size}];
  {P}_free();
  FILE *f = fopen(weights_path, "rb");
  if (f == NULL) return {U}_ERR_OPEN;
  if (fread(head, 1, sizeof head, f) != sizeof head || memcmp(head, "{WEIGHTS_MAGIC.decode()}", 8) != 0 ||
      {P}_le(head + 8, 4) != {WEIGHTS_VERSION}u) {{
    fclose(f);
    return {U}_ERR_FORMAT;
  }}
  if ({P}_le(head + 12, 4) != {U}_N_WEIGHTS || {P}_le(head + 16, 8) != {U}_PAYLOAD_BYTES ||
      {P}_le(head + 24, 8) != {U}_FINGERPRINT) {{
    fclose(f);
    return {U}_ERR_MODEL;
  }}
  /* the file must end where the payload does: a truncated or padded file is refused before any read */
  if (fseek(f, 0, SEEK_END) != 0 || ftell(f) != (long)({HEADER.size} + {U}_PAYLOAD_BYTES) ||
      fseek(f, {HEADER.size}, SEEK_SET) != 0) {{
    fclose(f);
    return {U}_ERR_SIZE;
  }}
  {P}_raw = (unsigned char *)calloc(1, {U}_ARENA_BYTES + {ALIGN});
  if ({P}_raw == NULL) {{
    fclose(f);
    return {U}_ERR_MEMORY;
  }}
  {P}_memory = {P}_raw + ({ALIGN} - (uintptr_t){P}_raw % {ALIGN}) % {ALIGN};
  unsigned long long at = 0;
  for (unsigned i = 0; i < {U}_N_WEIGHTS; i++) {{
    unsigned long long n = {P}_weights[i][1], padded = (n + {ALIGN - 1}) / {ALIGN} * {ALIGN};
    if (fread({P}_memory + {P}_weights[i][0], 1, n, f) != n || fseek(f, (long)(padded - n), SEEK_CUR) != 0) {{
      fclose(f);
      {P}_free();
      return {U}_ERR_SIZE;
    }}
    at += padded;
  }}
  fclose(f);
  return at == {U}_PAYLOAD_BYTES ? {U}_OK : ({P}_free(), {U}_ERR_SIZE);
}}

int {P}_run(const void *const *inputs, void *const *outputs) {{
  unsigned char *M = {P}_memory;
  if (M == NULL) return {U}_ERR_NOT_INITIALIZED;
{ins}
{chr(10).join(calls)}
{outs}
  return {U}_OK;
}}
"""
    header = render_header(plan, P, U, renderer.var_bounds)
    manifest = {"format": "tinygrad.export.c", "version": 1, "function": plan.name, "prefix": P,
                "weights_file": f"{P}.bin", "source": f"{P}.c", "header": f"{P}.h",
                "inputs": [{"name": n, **_port(p)} for n, p in zip(plan.input_names, plan.inputs)],
                "outputs": [{"name": n, **_port(p)} for n, p in zip(plan.output_names, plan.outputs)],
                "variables": [{"name": n, "min": renderer.var_bounds.get(n, (None, None))[0],
                               "max": renderer.var_bounds.get(n, (None, None))[1], "captured": v}
                              for n, v in plan.variables.items()]}
    return source, header, blob, manifest


def _var_source(plan: Plan, bounds: dict[str, tuple[int, int]], P: str, U: str) -> str:
    """The Variables' values (those of the capture until set) and the setter that checks them."""
    if not plan.variables:
        return ""
    names = list(plan.variables)
    lo_hi = [bounds.get(n, (-(1 << 63), (1 << 63) - 1)) for n in names]
    return f"""static long long {P}_vars[] = {{{", ".join(str(v) for v in plan.variables.values())}}};
static const char *const {P}_var_names[] = {{{", ".join(json.dumps(n) for n in names)}}};
static const long long {P}_var_bounds[][2] = {{{", ".join(f"{{{lo}ll, {hi}ll}}" for lo, hi in lo_hi)}}};

int {P}_set_var(const char *name, long long value) {{
  for (int i = 0; i < {len(names)}; i++)
    if (strcmp(name, {P}_var_names[i]) == 0) {{
      if (value < {P}_var_bounds[i][0] || value > {P}_var_bounds[i][1]) return {U}_ERR_VAR;
      {P}_vars[i] = value;
      return {U}_OK;
    }}
  return {U}_ERR_VAR;
}}
"""


def render_main(plan: Plan, P: str) -> str:
    """A command-line driver: `prog weights.bin inputs.raw outputs.raw [runs] [NAME=VALUE ...]` reads the inputs'
    bytes one after the other, sets the Variables given, runs the model, and writes the outputs' bytes one after
    the other."""
    U = P.upper()
    if plan.variables:
        set_var = (f"    *eq = 0;\n    if ({P}_set_var(argv[i], strtoll(eq + 1, NULL, 10)) != {U}_OK) {{\n"
                   f"      fprintf(stderr, \"%s: no such Variable, or a value out of its range\\n\", argv[i]);\n"
                   f"      return 1;\n    }}\n")
    else:
        set_var = "    fprintf(stderr, \"%s: this model takes no Variables\\n\", argv[i]);\n    return 1;\n"
    in_sizes = ", ".join(str(p.nbytes) for p in plan.inputs) or "0"
    out_sizes = ", ".join(str(p.nbytes) for p in plan.outputs)
    return f"""/* Generated by tinygrad.export: runs {P}.c on inputs from a file.
   cc -O2 {P}_main.c {P}.c -lm -o {P} && ./{P} {P}.bin inputs.raw outputs.raw [runs] [NAME=VALUE ...]
   inputs.raw: each input's bytes in order (C order, as {P}.h lists them); outputs.raw: the outputs' likewise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "{P}.h"

static const unsigned long long in_bytes[] = {{{in_sizes}}}, out_bytes[] = {{{out_sizes}}};

int main(int argc, char **argv) {{
  void *inputs[{U}_NUM_INPUTS + 1], *outputs[{U}_NUM_OUTPUTS];
  if (argc < 4) {{
    fprintf(stderr, "usage: %s WEIGHTS INPUTS OUTPUTS [RUNS] [NAME=VALUE ...]\\n", argv[0]);
    return 2;
  }}
  int rc = {P}_init(argv[1]);
  if (rc != {U}_OK) {{
    fprintf(stderr, "{P}_init(%s) failed: %d (see {P}.h)\\n", argv[1], rc);
    return 1;
  }}
  FILE *f = fopen(argv[2], "rb");
  if (f == NULL) {{ perror(argv[2]); return 1; }}
  for (int i = 0; i < {U}_NUM_INPUTS; i++) {{
    inputs[i] = malloc(in_bytes[i] ? in_bytes[i] : 1);
    if (inputs[i] == NULL || fread(inputs[i], 1, in_bytes[i], f) != in_bytes[i]) {{
      fprintf(stderr, "%s: too short for input %d (%llu bytes)\\n", argv[2], i, in_bytes[i]);
      return 1;
    }}
  }}
  if (fgetc(f) != EOF) {{ fprintf(stderr, "%s: longer than the inputs\\n", argv[2]); return 1; }}
  fclose(f);
  for (int i = 0; i < {U}_NUM_OUTPUTS; i++)
    if ((outputs[i] = malloc(out_bytes[i] ? out_bytes[i] : 1)) == NULL) return 1;
  int runs = 1;
  for (int i = 4; i < argc; i++) {{
    char *eq = strchr(argv[i], '=');
    if (eq == NULL) {{ runs = atoi(argv[i]); continue; }}
{set_var}  }}
  for (int r = 0; r < (runs > 0 ? runs : 1); r++)
    if ((rc = {P}_run((const void *const *)inputs, outputs)) != {U}_OK) {{
      fprintf(stderr, "{P}_run failed: %d\\n", rc);
      return 1;
    }}
  f = fopen(argv[3], "wb");
  if (f == NULL) {{ perror(argv[3]); return 1; }}
  for (int i = 0; i < {U}_NUM_OUTPUTS; i++)
    if (fwrite(outputs[i], 1, out_bytes[i], f) != out_bytes[i]) {{ perror(argv[3]); return 1; }}
  if (fclose(f) != 0) {{ perror(argv[3]); return 1; }}
  {P}_free();
  return 0;
}}
"""


def _port(p: Port) -> dict:
    return {"shape": list(p.shape), "dtype": p.dtype.name, "nbytes": p.nbytes}


def render_header(plan: Plan, P: str, U: str, bounds: dict[str, tuple[int, int]]) -> str:
    lines = [f"/* Generated by tinygrad.export: the interface of {P}.c (TinyJit function {plan.name}). */",
             f"#ifndef {U}_H", f"#define {U}_H", "",
             "/* return codes of init and run */",
             f"#define {U}_OK 0",
             f"#define {U}_ERR_OPEN (-1)            /* the weights file cannot be opened */",
             f"#define {U}_ERR_FORMAT (-2)          /* not a weights file of this format (magic or version) */",
             f"#define {U}_ERR_MODEL (-3)           /* a weights file for another model (count, size, layout) */",
             f"#define {U}_ERR_SIZE (-4)            /* the file is truncated or longer than its header says */",
             f"#define {U}_ERR_MEMORY (-5)          /* out of memory */",
             f"#define {U}_ERR_NOT_INITIALIZED (-6) /* run before a successful init */",
             f"#define {U}_ERR_VAR (-7)             /* set_var: no such Variable, or a value out of its range */",
             "",
             f"#define {U}_NUM_INPUTS {len(plan.inputs)}", f"#define {U}_NUM_OUTPUTS {len(plan.outputs)}"]
    for kind, ports in (("INPUT", plan.inputs), ("OUTPUT", plan.outputs)):
        for i, p in enumerate(ports):
            n = p.nbytes // p.dtype.itemsize
            lines += [f"/* {kind.lower()} {i}: {p.dtype.name}{list(p.shape)}, as {c_type(p.dtype)}[{n}] */",
                      f"#define {U}_{kind}{i}_DTYPE \"{p.dtype.name}\"",
                      f"#define {U}_{kind}{i}_NDIM {len(p.shape)}",
                      f"#define {U}_{kind}{i}_SHAPE {{{', '.join(map(str, p.shape)) or '1'}}}",
                      f"#define {U}_{kind}{i}_NUMEL {n}",
                      f"#define {U}_{kind}{i}_BYTES {p.nbytes}"]
    lines += ["",
              f"/* Read the weights file (written with this source) into memory; returns {U}_OK or an error code.",
              "   Calling it again reloads the weights. */",
              f"int {P}_init(const char *weights_path);",
              f"/* One run: inputs[i] points at input i's bytes (C order, {U}_INPUTi_BYTES), outputs[i] at room for",
              f"   output i's. Returns {U}_OK, or {U}_ERR_NOT_INITIALIZED. Not thread-safe: one run at a time. */",
              f"int {P}_run(const void *const *inputs, void *const *outputs);",
              *([f"/* Symbolic Variables the kernels take (the capture's values until set): {U}_VARi_NAME in",
                 f"   [{U}_VARi_MIN, {U}_VARi_MAX]. {P}_set_var(name, value) sets one for the following runs and",
                 f"   returns {U}_OK, or {U}_ERR_VAR for an unknown name or a value out of range. */",
                 f"#define {U}_NUM_VARS {len(plan.variables)}",
                 *(line for i, (n, v) in enumerate(plan.variables.items()) for line in (
                     f"#define {U}_VAR{i}_NAME \"{n}\"",
                     f"#define {U}_VAR{i}_MIN {bounds.get(n, (0, 0))[0]}ll",
                     f"#define {U}_VAR{i}_MAX {bounds.get(n, (0, 0))[1]}ll",
                     f"#define {U}_VAR{i}_CAPTURED {v}ll")),
                 f"int {P}_set_var(const char *name, long long value);"] if plan.variables else []),
              f"/* Give back the memory {P}_init took. */",
              f"void {P}_free(void);", "", f"#endif /* {U}_H */", ""]
    return "\n".join(lines)


def export_c(jit: Any, out_dir: str, prefix: str = "net", input_names: list[str] | None = None) -> dict:
    """Write, into `out_dir`, for a TinyJit function that has captured (called at least twice): `<prefix>.c`,
    `<prefix>.h`, `<prefix>.bin` (the weights), `<prefix>.json` (a manifest of the inputs and outputs) and
    `<prefix>_main.c` (a driver that reads the inputs from a file). `input_names` name the inputs in the manifest.
    Returns the manifest."""
    from tinygrad.export.plan import make_plan

    plan = make_plan(jit, input_names)
    source, header, blob, manifest = render_c(plan, prefix)
    os.makedirs(out_dir, exist_ok=True)
    write_atomic(os.path.join(out_dir, f"{prefix}.bin"), blob)
    write_atomic(os.path.join(out_dir, f"{prefix}.h"), header)
    write_atomic(os.path.join(out_dir, f"{prefix}.c"), source)
    write_atomic(os.path.join(out_dir, f"{prefix}_main.c"), render_main(plan, prefix))
    write_atomic(os.path.join(out_dir, f"{prefix}.json"), json.dumps(manifest, indent=2) + "\n")
    return manifest
