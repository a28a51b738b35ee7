"""The LLVM path's contraction rule, and its register tiles written as LLVM vectors.

Contraction. With the target machine's default fusion mode LLVM fuses a multiply and an add only where they are
written as one `llvm.fmuladd` or as a product whose one use is an add, both with the `contract` flag (on a target with
FMA instructions always, without them never). The renderer writes a vector tile's as `llvm.fmuladd` and the others
as such a flagged pair (the SLP vectoriser leaves scalar `llvm.fmuladd` calls scalar), where the rule (`fused_adds`,
CPU_FMA) says, and flags nothing else: by default
("accumulate") a float32/float64 product added to a reduction's accumulator (`acc + a*b`, a matmul's and a
convolution's inner step), and no other product. So an elementwise value rounds the same whether its product is
computed in the kernel that adds it or stored by another kernel first (a batch norm of random numbers computed in
one kernel and read from a realized buffer in another differed by an ulp when products could fuse into the adds
of elementwise code: with `contract` the code generator fused a product into its single use), and a register tile
keeps its FMAs. "all" fuses every product that feeds an add (LLVM's SLP vectoriser then leaves many tiles scalar),
"none" none (a reduction's tile is then a multiply and an add per step). float16 and the emulated floats round
after each op and are never fused.

Vector tiles. The C path's tile plan (`renderer.plan_vector_tiles`) finds the accumulators of a register tile that
one reduction updates alike, and how their update is computed lane by lane (`Lanes`). Here each such tile is one
`<N x T>` accumulator and its update one expression of vector instructions: loads of a row, splats, selects,
maxima, conversions and `llvm.fmuladd` under the rule above, lane for lane what the scalar code computes (bit for
bit: the same operations in the same order per lane). LLVM then
has nothing left to vectorise in the tile: it was the SLP vectoriser's work, and with InstCombine and the code
generator over hundreds of scalar accumulators most of a big kernel's compile time. The scalar code the tile
replaces is not written at all (`rendered_uops`). Rows that are not a whole number of vectors share them: a vector of
two parts (`TileBuilder.parts`), written as loads of a power of two lanes each, widened and blended, which x86 code
generation turns into the same half-vector loads and inserts as the SLP vectoriser's code for the scalar tile.
"""

from __future__ import annotations

from typing import Protocol

from tinygrad.dtype import DType, dtypes
from tinygrad.uop.ops import GroupOp, Ops, UOp

from tg_backend_cpu.byte_dot import byte_dots, host_has_byte_dot
from tg_backend_cpu.llvm_types import float_suffix, literal, value_type, vector_type
from tg_backend_cpu.renderer import Lanes, TileBuilder, VectorTile

#: the dtypes whose multiply-adds are fused (the others round after every op, as the reference does)
FUSED_DTYPES = frozenset({dtypes.float32, dtypes.float64})
#: ops that compute a value and nothing else: the kernel writes them only where something reads them
PURE_OPS = frozenset(GroupOp.ALU) | {Ops.LOAD, Ops.INDEX, Ops.CAST, Ops.BITCAST}
_COMPARISONS = (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)
_LOGIC = (Ops.AND, Ops.OR, Ops.XOR)


#: the contraction rules (CPU_FMA): LLVM's choice (`contract` flags on float32/float64 arithmetic), no product, only a
#: product added to a reduction's accumulator, or every product that feeds an add
FMA_RULES = ("contract", "none", "accumulate", "all")


def _mul_side(u: UOp) -> int | None:
    if u.op not in (Ops.ADD, Ops.SUB) or u.dtype not in FUSED_DTYPES:
        return None
    for side, s in enumerate(u.src):
        if s.op is Ops.MUL and s.dtype == u.dtype:
            return side
    return None


def fused_adds(program: list[UOp], rule: str) -> dict[UOp, int]:
    """The adds that the contraction rule fuses with a product, each with the side of its product operand."""
    if rule == "all":
        candidates = [u for u in program if u.op in (Ops.ADD, Ops.SUB)]
    elif rule == "accumulate":  # acc + a*b, the value an ASSIGN gives the accumulator it reads
        candidates = [a.src[1] for a in program if a.op is Ops.ASSIGN and a.src[1].op is Ops.ADD and
                      a.src[0] in a.src[1].src]
    else:
        return {}
    return {u: side for u in candidates if (side := _mul_side(u)) is not None}


class FusingTileBuilder(TileBuilder):
    """The C path's lanes, with the fused multiply-adds of the contraction rule: an ADD of three operands is
    `fmuladd(a, b, c)` (a SUB's subtrahend, or the product it is subtracted from, negated: exact), so that every
    lane computes what the scalar code computes for it (`fused`: the adds the rule fuses, `fused_adds`); and with
    vectors of two parts (`TileBuilder.parts`), which `TileWriter` writes as two loads and a shuffle."""

    parts_allowed = True

    def __init__(self, accs: tuple[UOp, ...], read_only: set[UOp], has_acc: dict[UOp, bool], mask: DType,
                 fused: dict[UOp, int]):
        super().__init__(accs, read_only, has_acc, mask)
        self.fused = fused

    def lanes(self, values: tuple[UOp, ...]) -> Lanes | None:
        first = values[0]
        if first.op is Ops.ADD and first.dtype == dtypes.int32 and (dots := self._byte_dots(values)) is not None:
            return dots
        if _is_constant_shift(first) and all(_is_constant_shift(v) and v.op is first.op and v.src[1] is first.src[1]
                                             and v.dtype == first.dtype for v in values):
            # a shift by a constant within the width: the scalar code's guard for wider shifts decides nothing
            shifted = self.lanes(tuple(v.src[0] for v in values))
            amount = self.lanes(tuple(v.src[1] for v in values))
            return None if shifted is None or amount is None else \
                Lanes("alu", first.dtype, op=first.op, args=(shifted, amount))
        if _is_half_bits(first) and all(_is_half_bits(v) for v in values):
            # float16 bits converted to float32 (a quantized block's scale): one conversion of the vector of bits
            bits = self.lanes(tuple(v.src[0].src[0] for v in values))
            return None if bits is None else Lanes("f16_bits", dtypes.float32, args=(bits,))
        side = self.fused.get(first)
        if side is None or values == self.accs or all(v is first for v in values):
            return super().lanes(values)
        d = first.dtype
        gathered = None if any(self.has_acc[v] for v in values) else Lanes("gather", d, values)
        if any(v.op is not first.op or v.dtype != d or self.fused.get(v) != side for v in values):
            return gathered  # lanes fused differently are computed by the scalar code
        muls = tuple(v.src[side] for v in values)
        a, b = self.lanes(tuple(m.src[0] for m in muls)), self.lanes(tuple(m.src[1] for m in muls))
        c = self.lanes(tuple(v.src[1 - side] for v in values))
        if a is None or b is None or c is None or not a.dtype == b.dtype == c.dtype == d:
            return gathered
        if first.op is Ops.SUB:
            if side == 0:  # a*b - c
                c = Lanes("alu", d, op=Ops.NEG, args=(c,))
            else:  # c - a*b
                a = Lanes("alu", d, op=Ops.NEG, args=(a,))
        return Lanes("alu", d, op=Ops.ADD, args=(a, b, c))


    def _byte_dots(self, values: tuple[UOp, ...]) -> Lanes | None:
        """int32 sums holding byte dots (`byte_dot`), lane by lane alike, as a "dot4": the sums' other terms added
        first, then each dot's words as vectors."""
        found = [byte_dots(v) for v in values]
        first = found[0]
        if first is None or any(f is None or [d.mask for d in f[0]] != [d.mask for d in first[0]] or
                                len(f[1]) != len(first[1]) for f in found):
            return None
        lanes_found = [f for f in found if f is not None]
        args: list[Lanes] = []
        for j in range(len(first[0])):
            u = self.lanes(tuple(f[0][j].u for f in lanes_found))
            v = self.lanes(tuple(f[0][j].v for f in lanes_found))
            if u is None or v is None or u.dtype.itemsize != 4 or v.dtype.itemsize != 4:
                return None
            args += [u, v]
        base: Lanes = Lanes("zero", dtypes.int32)
        for k in range(len(first[1])):
            term = self.lanes(tuple(f[1][k] for f in lanes_found))
            if term is None or term.dtype != dtypes.int32:
                return None
            base = term if base.kind == "zero" else Lanes("alu", dtypes.int32, op=Ops.ADD, args=(base, term))
        return Lanes("dot4", dtypes.int32, args=(base, *args), masks=tuple(d.mask for d in first[0]))


def _is_constant_shift(u: UOp) -> bool:
    """Whether u shifts a 32-bit integer by a constant less than 32 (the words of byte dots). Narrower lanes stay
    the scalar code's: the K-quants' byte unpacking measured slower as vector shifts of bytes."""
    return u.op in (Ops.SHL, Ops.SHR) and u.dtype in (dtypes.int32, dtypes.uint32) and u.src[1].op is Ops.CONST and \
        isinstance(u.src[1].arg, int) and 0 <= u.src[1].arg < 32


def _is_half_bits(u: UOp) -> bool:
    """Whether u is float32 made of 16 bits loaded and read as a float16: `bits.bitcast(float16).cast(float32)` (bits
    put together from bytes, as the K-quants' scales, stay the scalar code's: see `_is_constant_shift`)."""
    return u.op is Ops.CAST and u.dtype == dtypes.float32 and u.src[0].op is Ops.BITCAST and \
        u.src[0].dtype == dtypes.float16 and u.src[0].src[0].dtype in (dtypes.uint16, dtypes.int16) and \
        u.src[0].src[0].op is Ops.LOAD


def _splat(vt: str, width: int, value: int) -> str:
    """A constant i32 vector of `width` lanes of `value`."""
    return "<" + ", ".join([f"i32 {value}"] * width) + ">"


def _powers_of_two(n: int) -> list[int]:
    """n as a sum of powers of two, the largest first (12: 8 and 4)."""
    return [1 << b for b in reversed(range(n.bit_length())) if n >> b & 1]


def _leaves(lanes: Lanes) -> list[UOp]:
    """The scalar values a tile's update reads."""
    if lanes.kind in ("splat", "load", "gather"):
        return list(lanes.uops)
    return [leaf for a in lanes.args for leaf in _leaves(a)]


def scalar_sources(u: UOp, fused: dict[UOp, int]) -> tuple[UOp, ...]:
    """The values the scalar code reads to compute `u` (a fused add reads its product's factors, not the product)."""
    if (side := fused.get(u)) is not None:
        return (*u.src[side].src, u.src[1 - side])
    return u.src


def rendered_uops(program: list[UOp], tiles: list[VectorTile], fused: dict[UOp, int],
                  rebased: dict[UOp, tuple[UOp, int]] | None = None) -> set[UOp]:
    """The UOps the kernel writes: every one with an effect (a store, a loop, an accumulator), and the values these
    read, with a tile's update reading only its leaves (`_leaves`) and the tile's other updates nothing. A product
    that only fused adds read, or a lane's arithmetic that only its tile read, is not written; nor is the index sum
    of an INDEX written as an offset from a neighbour's address (`rebased`: INDEX -> (that neighbour, offset))."""
    rebased = rebased or {}
    tile_of = {a: t for t in tiles for a in t.assigns}
    keep: set[UOp] = set()
    for u in reversed(program):  # a linearized program lists each value before its readers
        if u in tile_of:
            tile = tile_of[u]
            if u is tile.last:
                keep.add(u)
                keep.update(_leaves(tile.update))
            continue
        if u in keep or u.op not in PURE_OPS:
            keep.add(u)
            keep.update((u.src[0], rebased[u][0]) if u in rebased else scalar_sources(u, fused))
    return keep


def is_mask(lanes: Lanes) -> bool:
    """Whether a tile's value is lanes of bools (an `<N x i1>`), not of its dtype (the C path's integer masks)."""
    if lanes.kind == "splat":
        return lanes.uops[0].dtype == dtypes.bool
    return lanes.kind == "alu" and (lanes.op in _COMPARISONS or (lanes.op in _LOGIC and is_mask(lanes.args[0])))


class Emitter(Protocol):
    """What `TileWriter` needs of the kernel it writes into (llvm_renderer's `_Kernel`)."""

    ref: dict[UOp, str]
    allocas: list[str]

    def fresh(self, prefix: str = "t") -> str: ...
    def ins(self, text: str) -> str: ...
    def do(self, text: str) -> None: ...
    def intrinsic(self, name: str, ret: str, args: list[tuple[str, str]]) -> str: ...
    def val(self, u: UOp) -> str: ...


class TileWriter:
    """Writes a kernel's vector tiles: an accumulator per tile (a stack slot of its vector type, promoted to a
    register by LLVM), its update where the last of its lanes' updates stands, and a lane's value where the scalar
    code reads an accumulator (after the reduction)."""

    def __init__(self, kernel: Emitter, tiles: list[VectorTile], flags: str):
        self.k, self.flags = kernel, flags  # `flags`: the float arithmetic's fast-math flags (" contract" or "")
        self.tile_of = {u: t for t in tiles for u in (*t.accs, *t.assigns)}
        self.lane_of = {acc: lane for t in tiles for lane, acc in enumerate(t.accs)}
        self.slot: dict[VectorTile, str] = {}

    def owns(self, u: UOp) -> bool:
        return u in self.tile_of

    @staticmethod
    def _type(tile: VectorTile) -> str:
        return vector_type(len(tile.accs), value_type(tile.accs[0].dtype))

    def define(self, acc: UOp) -> None:
        """The tile's accumulator, at its first lane's DEFINE_ACC (all of them precede the reduction's loop)."""
        tile = self.tile_of[acc]
        if acc is not tile.accs[0]:
            return
        t, et = self._type(tile), value_type(acc.dtype)
        self.slot[tile] = slot = "%" + self.k.fresh("vacc")
        self.k.allocas.append(f"  {slot} = alloca {t}")
        values = [literal(a.src[0].arg, a.dtype) for a in tile.accs]
        init = "zeroinitializer" if all(v == literal(0, acc.dtype) for v in values) else \
            "<" + ", ".join(f"{et} {v}" for v in values) + ">"
        self.k.do(f"store {t} {init}, ptr {slot}")

    def read(self, acc: UOp) -> str:
        """One accumulator's current value: its lane of the tile."""
        tile = self.tile_of[acc]
        t = self._type(tile)
        whole = self.k.ins(f"load {t}, ptr {self.slot[tile]}")
        return self.k.ins(f"extractelement {t} {whole}, i64 {self.lane_of[acc]}")

    def assign(self, u: UOp) -> None:
        """A lane's update: the whole tile's at the last of them, when every lane's operands exist."""
        tile = self.tile_of[u]
        if u is not tile.last:
            return
        value = self._emit(tile.update, tile, {})
        self.k.do(f"store {self._type(tile)} {value}, ptr {self.slot[tile]}")

    def _lane_type(self, lanes: Lanes, width: int) -> tuple[str, str]:
        et = "i1" if is_mask(lanes) else value_type(lanes.dtype)
        return vector_type(width, et), et

    def _emit(self, lanes: Lanes, tile: VectorTile, done: dict[tuple[Lanes, int], str], width: int = 0) -> str:
        width = width or len(tile.accs)  # a part of a vector has fewer lanes than the tile
        if (lanes, width) in done:  # an operand shared by two parts of the update is computed once
            return done[(lanes, width)]
        vt, et = self._lane_type(lanes, width)
        k = self.k
        if lanes.kind == "acc":
            out = k.ins(f"load {vt}, ptr {self.slot[tile]}")
        elif lanes.kind == "tile":  # another tile's accumulators, in its lane order (its reduction has ended)
            out = k.ins(f"load {vt}, ptr {self.slot[self.tile_of[lanes.uops[0]]]}")
        elif lanes.kind == "splat":
            one = k.ins(f"insertelement {vt} poison, {et} {k.val(lanes.uops[0])}, i64 0")
            out = k.ins(f"shufflevector {vt} {one}, {vt} poison, <{width} x i32> zeroinitializer")
        elif lanes.kind == "load":  # a row of a read-only input: the first lane's address, the element's alignment
            out = k.ins(f"load {vt}, ptr {k.ref[lanes.uops[0]]}, align {lanes.dtype.itemsize}")
        elif lanes.kind == "gather":
            out = "poison"
            for lane, u in enumerate(lanes.uops):
                out = k.ins(f"insertelement {vt} {out}, {et} {k.val(u)}, i64 {lane}")
        elif lanes.kind == "parts":
            out = self._parts(lanes, tile, done, width, vt, et)
        elif lanes.kind == "f16_bits":
            bits = self._emit(lanes.args[0], tile, done, width)
            half = k.ins(f"bitcast {vector_type(width, 'i16')} {bits} to {vector_type(width, 'half')}")
            out = k.ins(f"fpext {vector_type(width, 'half')} {half} to {vt}")
        elif lanes.kind == "zero":
            out = "zeroinitializer"
        elif lanes.kind == "dot4":
            out = self._byte_dots(lanes, [self._emit(a, tile, done, width) for a in lanes.args], width, vt)
        else:
            out = self._alu(lanes, vt, [self._emit(a, tile, done, width) for a in lanes.args], width)
        done[(lanes, width)] = out
        return out

    def _parts(self, lanes: Lanes, tile: VectorTile, done: dict[tuple[Lanes, int], str], width: int, vt: str,
               et: str) -> str:
        """A vector of parts (`TileBuilder.parts`) from pieces of a power of two lanes each (a row's 12 floats as
        loads of 8 and 4, which x86 code generation inserts into the vector whole; a load of 12 it built lane by
        lane), each widened to the whole vector at its lanes and blended into the others."""
        pieces: list[tuple[str, int, int]] = []  # (value, lanes, first lane)
        lane = 0
        for part, size in zip(lanes.args, lanes.sizes):
            done_in_part = 0
            for n in _powers_of_two(size):
                if part.kind == "load":
                    ptr = self.k.ref[part.uops[0]]
                    if done_in_part:
                        ptr = self.k.ins(f"getelementptr inbounds {et}, ptr {ptr}, i64 {done_in_part}")
                    value = self.k.ins(f"load {vector_type(n, et)}, ptr {ptr}, align {part.dtype.itemsize}")
                else:
                    value = self._emit(part, tile, done, n)
                pieces.append((value, n, lane))
                lane, done_in_part = lane + n, done_in_part + n
        out = ""
        for value, n, first in pieces:
            # widened: its lanes at [first, first + n), the others poison
            mask = ["poison"] * width
            mask[first:first + n] = [str(i) for i in range(n)]
            wide = self._shuffle(vector_type(n, et), value, "poison", mask)
            if not out:
                out = wide
                continue
            blend = [str(width + i) if first <= i < first + n else str(i) for i in range(width)]
            out = self._shuffle(vt, out, wide, blend)
        return out

    def _byte_dots(self, lanes: Lanes, args: list[str], width: int, vt: str) -> str:
        """args[0] plus each byte dot of a "dot4": one `vpdpbusd` where the host has it for this width, else its
        shifts and masks (`byte_dot`), lane for lane the same int32 sums."""
        k = self.k
        out = args[0]
        for j, mask in enumerate(lanes.masks):
            u, v = args[1 + 2 * j], args[2 + 2 * j]
            if mask != 0xFF:
                u = k.ins(f"and {vt} {u}, {_splat(vt, width, mask * 0x01010101)}")
            if host_has_byte_dot(width):
                out = k.intrinsic(f"llvm.x86.avx512.vpdpbusd.{width * 32}", vt, [(vt, out), (vt, u), (vt, v)])
                continue
            for i in range(4):
                ub = k.ins(f"and {vt} {k.ins(f'lshr {vt} {u}, {_splat(vt, width, 8 * i)}')}, {_splat(vt, width, 0xFF)}")
                vb = k.ins(f"ashr {vt} {k.ins(f'shl {vt} {v}, {_splat(vt, width, 24 - 8 * i)}')}, "
                           f"{_splat(vt, width, 24)}")
                out = k.ins(f"add {vt} {out}, {k.ins(f'mul {vt} {ub}, {vb}')}")
        return out

    def _shuffle(self, t: str, a: str, b: str, mask: list[str]) -> str:
        lanes = ", ".join(f"i32 {m}" for m in mask)
        return self.k.ins(f"shufflevector {t} {a}, {t} {b}, <{len(mask)} x i32> <{lanes}>")

    def _alu(self, lanes: Lanes, vt: str, args: list[str], width: int) -> str:
        op, d, k = lanes.op, lanes.dtype, self.k
        if op is Ops.ADD and len(args) == 3:
            return k.intrinsic(f"llvm.fmuladd.v{width}{float_suffix(value_type(d))}", vt, [(vt, a) for a in args])
        if op is Ops.NEG:
            return k.ins(f"fneg {vt} {args[0]}")
        if op is Ops.WHERE:
            return k.ins(f"select {vector_type(width, 'i1')} {args[0]}, {vt} {args[1]}, {vt} {args[2]}")
        if op is Ops.MAX:  # float lanes only (the plan's rule): NaN wins, +0.0 beats -0.0, as the scalar code
            return k.intrinsic(f"llvm.maximum.v{width}{float_suffix(value_type(d))}", vt, [(vt, a) for a in args])
        src = lanes.args[0]
        st, _ = self._lane_type(src, width)
        if op is Ops.CAST:  # to a float, from a float or an integer (the plan's rule)
            return self._convert(args[0], src.dtype, st, d, vt)
        if op in _COMPARISONS:
            if is_mask(src):
                return k.ins(f"icmp {'eq' if op is Ops.CMPEQ else 'ne'} {st} {args[0]}, {args[1]}")
            if src.dtype.is_float:
                return k.ins(f"fcmp {({Ops.CMPLT: 'olt', Ops.CMPNE: 'une', Ops.CMPEQ: 'oeq'})[op]} {st} "
                             f"{args[0]}, {args[1]}")
            lt = "ult" if src.dtype.is_unsigned else "slt"
            return k.ins(f"icmp {({Ops.CMPLT: lt, Ops.CMPNE: 'ne', Ops.CMPEQ: 'eq'})[op]} {st} {args[0]}, {args[1]}")
        if op is Ops.SHL or op is Ops.SHR:  # by a constant within the width (the builder's rule)
            instr = "shl" if op is Ops.SHL else ("lshr" if d.is_unsigned else "ashr")
            return k.ins(f"{instr} {vt} {args[0]}, {args[1]}")
        if op in _LOGIC:
            return k.ins(f"{({Ops.AND: 'and', Ops.OR: 'or', Ops.XOR: 'xor'})[op]} {vt} {args[0]}, {args[1]}")
        if op in (Ops.ADD, Ops.SUB, Ops.MUL):  # products are fused only as the rule says (len 3 above)
            instr = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul"}[op]
            return k.ins(f"{'f' + instr + self.flags if d.is_float else instr} {vt} {args[0]}, {args[1]}")
        raise NotImplementedError(f"LLVM vector tiles cannot write {op} of {d}")

    def _convert(self, x: str, frm: DType, st: str, to: DType, vt: str) -> str:
        if frm.is_float:
            size = {"half": 16, "float": 32, "double": 64}
            a, b = size[value_type(frm)], size[value_type(to)]
            return x if a == b else self.k.ins(f"{'fpext' if b > a else 'fptrunc'} {st} {x} to {vt}")
        return self.k.ins(f"{'uitofp' if frm.is_unsigned else 'sitofp'} {st} {x} to {vt}")
