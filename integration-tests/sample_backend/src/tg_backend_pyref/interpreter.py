"""The program: decode the JSON the renderer wrote and run it, one scalar at a time, in Python.

Every value is computed by the reference semantics in `tinygrad.uop.alu` (`exec_alu`, `exec_cast`,
`exec_bitcast`), so this backend is an oracle for the others: slow, but exactly what each op means.

To keep small kernels quick, the decoded program is turned once into nested lists of small Python
closures ("steps"): straight-line code is a list of steps, a RANGE ... END becomes one step that loops
over its body list, IF ... ENDIF one that runs its body when the condition holds. Every UOp writes its
value into a register (a list slot at its position in the program). ALU ops over integers and bools
remember recent results: the index arithmetic of nested loops repeats the same operands over and over.
Floats are never memoised (0.0 and -0.0 compare equal as dict keys, NaN never does).

Loads and stores are bounds-checked: an out-of-range access is a bug in the compiler, and the oracle
says so instead of reading garbage.
"""

from __future__ import annotations

import json
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tinygrad.codegen import ProgramSpec
from tinygrad.dtype import EMULATED_FLOATS, DType, bits_to_float, dtypes, float_to_bits
from tinygrad.errors import CompileError
from tinygrad.uop.alu import REFERENCE_OPS, exec_alu, exec_bitcast, exec_cast
from tinygrad.uop.ops import Ops

from tg_backend_pyref.renderer import FORMAT_NAME, FORMAT_VERSION

Step = Callable[[], None]

#: results remembered per integer ALU op before its memo is cleared (bounds memory on long loops)
MEMO_LIMIT = 1 << 14
_DTYPES: dict[str, DType] = {d.name: d for d in dtypes.all()} | {"void": dtypes.void}
_STRUCTURAL = {Ops.CONST, Ops.PARAM, Ops.DEFINE_VAR, Ops.RANGE, Ops.END, Ops.IF, Ops.ENDIF, Ops.INDEX, Ops.LOAD,
               Ops.STORE, Ops.DEFINE_ACC, Ops.ASSIGN, Ops.CAST, Ops.BITCAST, Ops.BARRIER, Ops.NOOP}
SUPPORTED_OPS = frozenset(_STRUCTURAL) | REFERENCE_OPS


class ProgramFormatError(CompileError):
    """The bytes are not a program this interpreter can run."""


class OutOfBoundsError(IndexError):
    """A kernel read or wrote outside its buffer."""


@dataclass(frozen=True)
class Instr:
    op: Ops
    dtype: DType
    src: tuple[int, ...]
    arg: Any


def _decode_arg(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, list):
        return tuple(_decode_arg(v, where) for v in value)
    if isinstance(value, dict) and len(value) == 1:
        (kind, body), = value.items()
        try:
            if kind == "float":
                return float.fromhex(body)
            if kind == "op":
                return Ops[body]
            if kind == "dtype":
                return _DTYPES[body]
        except (KeyError, ValueError, TypeError):
            pass
    raise ProgramFormatError(f"{where}: cannot decode the argument {value!r}")


def decode_program(data: bytes | str) -> tuple[str, list[Instr]]:
    """(kernel name, instructions) from the renderer's JSON; checks everything the interpreter relies on."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ProgramFormatError(f"not a PYREF program: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
        raise ProgramFormatError(f"not a PYREF program: the JSON has no \"format\": \"{FORMAT_NAME}\" header")
    if doc.get("version") != FORMAT_VERSION:
        raise ProgramFormatError(f"PYREF program format version {doc.get('version')!r}, this interpreter reads "
                                 f"version {FORMAT_VERSION}; re-render the kernel with this tg-backend-pyref")
    name, uops = doc.get("name"), doc.get("uops")
    if not isinstance(name, str) or not isinstance(uops, list):
        raise ProgramFormatError("a PYREF program needs a string \"name\" and a list \"uops\"")
    program: list[Instr] = []
    for i, entry in enumerate(uops):
        where = f"kernel {name}, UOp {i}"
        if not isinstance(entry, dict) or entry.get("i") != i:
            raise ProgramFormatError(f"{where}: expected an object with \"i\": {i}, got {entry!r}")
        try:
            op = Ops[entry["op"]]
            dtype = _DTYPES[entry["dtype"]]
        except (KeyError, TypeError):
            raise ProgramFormatError(f"{where}: unknown op or dtype in {entry!r}") from None
        if op not in SUPPORTED_OPS:
            raise ProgramFormatError(f"{where}: the PYREF interpreter cannot run {op.name}")
        src = entry.get("src")
        if not isinstance(src, list) or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < i
                                                for s in src):
            raise ProgramFormatError(f"{where}: \"src\" must list positions of earlier UOps, got {src!r}")
        program.append(Instr(op, dtype, tuple(src), _decode_arg(entry.get("arg"), where)))
    return name, program


# ---- memory: how a buffer of each dtype is viewed, read and written ----

def _float16_table() -> list[float]:
    return list(struct.unpack(f"<{1 << 16}e", struct.pack(f"<{1 << 16}H", *range(1 << 16))))


def _emulated_table(dtype: DType) -> list[float]:
    return [bits_to_float(b, dtype) for b in range(1 << dtype.bits)]


_TABLES: dict[str, list[float]] = {}
#: dtypes whose buffers are viewed as bit patterns and converted on each load and store
BIT_PATTERN_DTYPES = (dtypes.float16, *EMULATED_FLOATS)


def _half_table(dtype: DType) -> list[float]:
    """The value of every bit pattern of a 16- or 8-bit float."""
    if dtype.name not in _TABLES:
        _TABLES[dtype.name] = _float16_table() if dtype == dtypes.float16 else _emulated_table(dtype)
    return _TABLES[dtype.name]


def _half_bits(value: float, dtype: DType) -> int:
    if dtype in EMULATED_FLOATS:
        return float_to_bits(value, dtype)
    return struct.unpack("<H", struct.pack("<e", value))[0]


def memory_format(dtype: DType) -> str:
    """The memoryview format a buffer of `dtype` is viewed through."""
    # memoryview has no 'e' format and no bfloat16 or 8-bit floats: those are viewed as their bit patterns
    if dtype in BIT_PATTERN_DTYPES:
        bits = EMULATED_FLOATS.get(dtype, dtypes.uint16)
        assert bits.fmt is not None
        return bits.fmt
    assert dtype.fmt is not None
    return dtype.fmt


def zero_of(dtype: DType) -> Any:
    return exec_cast(0, dtype)


# ---- building the steps ----

class _Builder:
    def __init__(self, name: str, program: list[Instr]):
        self.name, self.program = name, program
        self.regs: list[Any] = [None] * len(program)
        self.init: list[Any] = [None] * len(program)
        self.params: list[tuple[int, int, int, DType]] = []  # (register, param index, size, dtype)
        self.vars: list[tuple[int, str, int, int]] = []  # (register, name, min, max)

    def fail(self, i: int, why: str) -> ProgramFormatError:
        return ProgramFormatError(f"kernel {self.name}, UOp {i} ({self.program[i].op.name}): {why}")

    def build(self) -> list[Step]:
        # each open block: (opening UOp position, its body steps)
        blocks: list[tuple[int, list[Step]]] = [(-1, [])]
        for i, ins in enumerate(self.program):
            body = blocks[-1][1]
            op = ins.op
            if op is Ops.CONST:
                self.init[i] = exec_cast(ins.arg, ins.dtype)
            elif op is Ops.PARAM:
                if not (isinstance(ins.arg, tuple) and len(ins.arg) == 2):
                    raise self.fail(i, f"expected arg (index, size), got {ins.arg!r}")
                slot, size = ins.arg
                self.params.append((i, int(slot), int(size), ins.dtype))
            elif op is Ops.DEFINE_VAR:
                if not (isinstance(ins.arg, tuple) and len(ins.arg) == 3):
                    raise self.fail(i, f"expected arg (name, min, max), got {ins.arg!r}")
                name, vmin, vmax = ins.arg
                self.vars.append((i, str(name), int(vmin), int(vmax)))
            elif op in (Ops.RANGE, Ops.IF):
                if len(ins.src) < 1 or (op is Ops.RANGE and not self.program[ins.src[0]].dtype.is_int):
                    raise self.fail(i, "expected an integer end as its source" if op is Ops.RANGE else
                                    "expected a condition as its first source")
                blocks.append((i, []))
            elif op in (Ops.END, Ops.ENDIF):
                opener, inner = blocks.pop() if len(blocks) > 1 else (-1, [])
                want = Ops.RANGE if op is Ops.END else Ops.IF
                if opener < 0 or not ins.src or ins.src[0] != opener or self.program[opener].op is not want:
                    raise self.fail(i, f"does not close the innermost open {want.name}")
                blocks[-1][1].append(self.loop(opener, inner) if op is Ops.END else self.cond(opener, inner))
            elif op is Ops.INDEX:
                self.check_index(i)
            elif op is Ops.LOAD:
                body.append(self.load(i))
            elif op is Ops.STORE:
                body.append(self.store(i))
            elif op is Ops.DEFINE_ACC:
                if len(ins.src) != 1:
                    raise self.fail(i, "expected src (initial value,)")
                body.append(self.copy(i, ins.src[0]))
            elif op is Ops.ASSIGN:
                if len(ins.src) != 2 or self.program[ins.src[0]].op is not Ops.DEFINE_ACC:
                    raise self.fail(i, "expected src (DEFINE_ACC, value)")
                body.append(self.assign(i, ins.src[0], ins.src[1]))
            elif op in REFERENCE_OPS or op in (Ops.CAST, Ops.BITCAST):
                body.append(self.alu(i))
            # BARRIER and NOOP do nothing in a single-threaded interpreter
        if len(blocks) != 1:
            opener = blocks[-1][0]
            raise self.fail(opener, "is never closed")
        return blocks[0][1]

    # -- control flow --
    def loop(self, r: int, body: list[Step]) -> Step:
        regs, end = self.regs, self.program[r].src[0]

        def run_range() -> None:
            for v in range(regs[end]):
                regs[r] = v
                for step in body:
                    step()
        return run_range

    def cond(self, at: int, body: list[Step]) -> Step:
        regs, gate = self.regs, self.program[at].src[0]

        def run_if() -> None:
            if regs[gate]:
                for step in body:
                    step()
        return run_if

    def copy(self, i: int, src: int) -> Step:
        regs = self.regs

        def define_acc() -> None:
            regs[i] = regs[src]
        return define_acc

    def assign(self, i: int, acc: int, value: int) -> Step:
        regs = self.regs

        def assign() -> None:
            regs[acc] = regs[i] = regs[value]
        return assign

    # -- memory --
    def check_index(self, i: int) -> None:
        ins = self.program[i]
        if len(ins.src) not in (2, 3) or self.program[ins.src[0]].op is not Ops.PARAM:
            raise self.fail(i, "expected src (PARAM, index) or (PARAM, index, gate)")
        if not self.program[ins.src[1]].dtype.is_int:
            raise self.fail(i, f"the index must be an integer, not {self.program[ins.src[1]].dtype}")
        if len(ins.src) == 3 and not self.program[ins.src[2]].dtype.is_bool:
            raise self.fail(i, f"the gate must be a bool, not {self.program[ins.src[2]].dtype}")

    def _memory(self, i: int) -> tuple[int, int, int | None, DType, str]:
        """For the LOAD or STORE at i: (buffer register, index register, gate register, dtype, description)."""
        ins = self.program[i]
        if not ins.src or self.program[ins.src[0]].op is not Ops.INDEX:
            raise self.fail(i, "its first source must be an INDEX")
        index = self.program[ins.src[0]]
        param = self.program[index.src[0]]
        gate = index.src[2] if len(index.src) == 3 else None
        slot, size = param.arg
        return index.src[0], index.src[1], gate, param.dtype, f"data{slot} ({param.dtype.name}[{size}])"

    def _out_of_bounds(self, what: str, buf: str, idx: Any) -> OutOfBoundsError:
        return OutOfBoundsError(f"kernel {self.name} {what} {buf} at index {idx}, outside the buffer: the compiler "
                                "produced a bad index (or a LOAD/STORE that needed a gate)")

    def load(self, i: int) -> Step:
        regs = self.regs
        buf, idx, gate, dtype, desc = self._memory(i)
        if dtype != self.program[i].dtype:
            raise self.fail(i, f"loads {self.program[i].dtype} from a {dtype} buffer")
        table = _half_table(dtype) if dtype in BIT_PATTERN_DTYPES else None
        zero = zero_of(dtype)
        oob = self._out_of_bounds

        def load() -> None:
            if gate is not None and not regs[gate]:
                regs[i] = zero
                return
            k = regs[idx]
            try:
                if k < 0:
                    raise IndexError
                v = regs[buf][k]
            except IndexError:
                raise oob("reads", desc, k) from None
            regs[i] = v if table is None else table[v]
        return load

    def store(self, i: int) -> Step:
        regs = self.regs
        buf, idx, gate, dtype, desc = self._memory(i)
        value = self.program[i].src[1] if len(self.program[i].src) == 2 else None
        if value is None:
            raise self.fail(i, "expected src (INDEX, value)")
        if self.program[value].dtype != dtype:
            raise self.fail(i, f"stores a {self.program[value].dtype} value into a {dtype} buffer")
        half = dtype if dtype in BIT_PATTERN_DTYPES else None
        oob = self._out_of_bounds

        def store() -> None:
            if gate is not None and not regs[gate]:
                return
            k, v = regs[idx], regs[value]
            if half is not None:
                v = _half_bits(v, half)
            try:
                if k < 0:
                    raise IndexError
                regs[buf][k] = v
            except IndexError:
                raise oob("writes", desc, k) from None
        return store

    # -- values --
    def alu(self, i: int) -> Step:
        ins = self.program[i]
        op, dtype, src = ins.op, ins.dtype, ins.src
        src_dtypes = [self.program[s].dtype for s in src]
        if op is Ops.CAST:
            if len(src) != 1:
                raise self.fail(i, "expected one source")
            to = dtype

            def fn(operands: tuple[Any, ...]) -> Any:
                return exec_cast(operands[0], to)
        elif op is Ops.BITCAST:
            if len(src) != 1:
                raise self.fail(i, "expected one source")
            frm, to = src_dtypes[0], dtype
            if frm.itemsize != to.itemsize:
                raise self.fail(i, f"bitcast between sizes: {frm} ({frm.itemsize} bytes) to {to} ({to.itemsize})")

            def fn(operands: tuple[Any, ...]) -> Any:
                return exec_bitcast(operands[0], frm, to)
        else:
            arity = 1 if op in (Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC) else \
                3 if op is Ops.WHERE else 2
            if len(src) != arity:
                raise self.fail(i, f"expected {arity} sources, got {len(src)}")
            # the dtype the operands are in (WHERE: its value operands, not the condition)
            operand_dtype = src_dtypes[-1]

            def fn(operands: tuple[Any, ...]) -> Any:
                return exec_alu(op, dtype, operands, operand_dtype)

        if any(d.is_float for d in src_dtypes):
            return self._plain(i, src, fn)
        return self._memoised(i, src, fn)

    def _plain(self, i: int, src: tuple[int, ...], fn: Callable[[tuple[Any, ...]], Any]) -> Step:
        regs = self.regs
        if len(src) == 1:
            a, = src

            def unary() -> None:
                regs[i] = fn((regs[a],))
            return unary
        if len(src) == 2:
            a, b = src

            def binary() -> None:
                regs[i] = fn((regs[a], regs[b]))
            return binary
        a, b, c = src

        def ternary() -> None:
            regs[i] = fn((regs[a], regs[b], regs[c]))
        return ternary

    def _memoised(self, i: int, src: tuple[int, ...], fn: Callable[[tuple[Any, ...]], Any]) -> Step:
        # one closure per arity on purpose: this runs once per element of every kernel, and building the key
        # without a loop over `src` is what keeps the interpreter usable for the op tables
        regs: list[Any] = self.regs
        memo: dict[tuple[Any, ...], Any] = {}
        if len(src) == 1:
            a, = src

            def unary() -> None:
                key = (regs[a],)
                v = memo.get(key)
                if v is None:
                    if len(memo) >= MEMO_LIMIT:
                        memo.clear()
                    v = memo[key] = fn(key)
                regs[i] = v
            return unary
        if len(src) == 2:
            a, b = src

            def binary() -> None:
                key = (regs[a], regs[b])
                v = memo.get(key)
                if v is None:
                    if len(memo) >= MEMO_LIMIT:
                        memo.clear()
                    v = memo[key] = fn(key)
                regs[i] = v
            return binary
        a, b, c = src

        def ternary() -> None:
            key = (regs[a], regs[b], regs[c])
            v = memo.get(key)
            if v is None:
                if len(memo) >= MEMO_LIMIT:
                    memo.clear()
                v = memo[key] = fn(key)
            regs[i] = v
        return ternary


def check_program(data: bytes | str) -> None:
    """Raise ProgramFormatError unless `data` is a program the interpreter can run (what compile() checks)."""
    name, program = decode_program(data)
    _Builder(name, program).build()


class PyRefProgram:
    """One kernel, ready to run: `program(*buffers, vals=...)`.

    Buffers come in the order of the kernel's PARAM indices (the order `Compiled` passes them);
    `vals` binds the kernel's DEFINE_VARs in the order of their names.
    """

    def __init__(self, spec: ProgramSpec, lib: bytes):
        self.name = name = spec.name
        decoded_name, program = decode_program(lib)
        if decoded_name != name:
            raise ProgramFormatError(f"asked to load kernel {name}, but the program is {decoded_name}")
        builder = _Builder(name, program)
        self.steps = builder.build()
        self.regs, self.init = builder.regs, builder.init
        # buffers arrive in the order of the PARAM indices; one index may be named by several PARAM UOps
        self.param_indices = sorted({index for _, index, _, _ in builder.params})
        self.params = builder.params
        self.vars = builder.vars
        self.var_names = sorted({name for _, name, _, _ in builder.vars})
        self._lock = threading.Lock()  # the registers are shared by the steps: one launch at a time

    def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None:
        if len(bufs) != len(self.param_indices):
            raise TypeError(f"kernel {self.name} takes {len(self.param_indices)} buffers, got {len(bufs)}")
        if len(vals) != len(self.var_names):
            raise TypeError(f"kernel {self.name} takes {len(self.var_names)} variable values "
                            f"({self.var_names}), got {len(vals)}")
        with self._lock:
            regs = self.regs
            regs[:] = self.init
            try:
                by_index = dict(zip(self.param_indices, bufs, strict=True))
                for reg, index, size, dtype in self.params:
                    buf = by_index[index]
                    nbytes = size * dtype.itemsize
                    if len(buf) < nbytes:
                        raise ValueError(f"kernel {self.name}: data{index} needs {nbytes} bytes, "
                                         f"the buffer has {len(buf)}")
                    regs[reg] = memoryview(buf)[:nbytes].cast(memory_format(dtype))  # type: ignore[call-overload]
                by_name = dict(zip(self.var_names, vals, strict=True))
                for reg, name, lo, hi in self.vars:
                    v = by_name[name]
                    if not lo <= v <= hi:
                        raise ValueError(f"kernel {self.name}: variable {name}={v} is outside its range [{lo}, {hi}]")
                    regs[reg] = v
                st = time.perf_counter()
                for step in self.steps:
                    step()
                elapsed = time.perf_counter() - st
            finally:
                for reg, *_ in self.params:
                    if isinstance(regs[reg], memoryview):
                        regs[reg].release()
                regs[:] = self.init  # drop the views and values of this launch
        return elapsed if wait else None
