"""Decomposition: every ALU op the renderer does not declare (`Renderer.supported_ops`) is rewritten into ops it does.

Each rule keeps the reference semantics of `tinygrad.uop.alu` exactly (NaN, infinities, signed zeros, integer
wrap-around, division by zero, shifts past the width):

* CMPNE(a, b)   -> XOR(CMPEQ(a, b), True)                           (NaN != NaN stays true)
* MAX(a, b)     -> bool: OR; integers: WHERE(a < b, b, a); floats: NaN first, then the larger, and for equal
                   values the AND of their bits (+0.0 against -0.0 gives +0.0, equal values give themselves)
* FDIV(a, b)    -> MUL(a, RECIPROCAL(b)) in a float with twice the mantissa (float16 in float32, float32 and
                   bfloat16 in float64) where the target has one: its two roundings cannot move the narrower result
                   off the correctly rounded quotient (53 >= 2 * 24 + 2 bits). In the widest float one correction
                   step on the exact remainder a - q*b (Dekker's product) rounds it correctly, the operands scaled
                   by powers of two so that nothing in between underflows or overflows
* SHL(a, b)     -> WHERE(b out of [0, bits), 0, a * 2**b), with 2**b built from the bits of b
* SHR(a, b)     -> the quotient by 2**b, rounded down for negative a (an arithmetic shift)
* EXP2(x)       -> in float64: 2**n * p(x - n), n = round(x), p a polynomial; then rounded to x's dtype
* LOG2(x)       -> in float64: exponent + 2/ln 2 * atanh((m - 1) / (m + 1)) of the mantissa m, as a polynomial
                   (EXP2 and LOG2 are within the kit's 4 ulp in float64 and so within an ulp in narrower floats;
                   a target without float64 must declare them)

A rule only fires for an op outside the renderer's set, and every op it emits is either declared or decomposed in
turn (the rewrite runs to a fixed point). An op that is still undeclared afterwards has no rule that makes it from
the declared ones: `decompose` raises naming the op, the dtype and the renderer. `get_program` runs `decompose` on
the kernel before linearizing, and `decompose_program` on the linearized program for the one op the linearizer
writes itself (a reduction's accumulate). Both do nothing for a renderer that declares every op.
"""

from __future__ import annotations

import math

from tinygrad.dtype import DType, dtypes
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import GroupOp, Ops, UOp
from tinygrad.uop.rewrite import PatternMatcher, UPat, graph_rewrite

#: the unsigned integer of each float's width, for the bitwise tie of MAX
_BITS_OF: dict[int, DType] = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def _cmpne(ctx: Renderer, x: UOp) -> UOp | None:
    if Ops.CMPNE in ctx.supported_ops:
        return None
    a, b = x.src
    return a.eq(b).alu(Ops.XOR, UOp.const(dtypes.bool, True))


def _max(ctx: Renderer, x: UOp) -> UOp | None:
    if Ops.MAX in ctx.supported_ops:
        return None
    a, b = x.src
    if x.dtype == dtypes.bool:
        return a.alu(Ops.OR, b)
    larger = a.lt(b).where(b, a)
    if not x.dtype.is_float:
        return larger
    # equal operands (a < b and b < a both false, neither NaN): the AND of the bits is +0.0 for a pair of zeros of
    # different signs and the value itself otherwise
    bits = _BITS_OF[x.dtype.itemsize]
    tie = a.bitcast(bits).alu(Ops.AND, b.bitcast(bits)).bitcast(x.dtype)
    ordered = a.lt(b).where(b, b.lt(a).where(a, tie))
    return a.ne(a).where(a, b.ne(b).where(b, ordered))


def _fdiv(ctx: Renderer, x: UOp) -> UOp | None:
    if Ops.FDIV in ctx.supported_ops:
        return None
    a, b = x.src
    # a float with twice the mantissa and a wider exponent (the reciprocal of a subnormal stays finite) divides
    # correctly rounded as a MUL by the RECIPROCAL: its two roundings cannot move the narrower result
    bits, exponent = _MANTISSA_BITS.get(x.dtype.name, 0), _EXPONENT_BITS.get(x.dtype.name, 0)
    for wide in (dtypes.float32, dtypes.float64):
        if _MANTISSA_BITS[wide.name] >= 2 * bits + 2 and _EXPONENT_BITS[wide.name] > exponent and \
                ctx.supports_dtype(wide):
            return (a.cast(wide) * b.cast(wide).alu(Ops.RECIPROCAL)).cast(x.dtype)
    if x.dtype.name not in _DIVISION_RANGE:
        return a * b.alu(Ops.RECIPROCAL)
    return _corrected_quotient(a, b)


#: the mantissa bits (with the implicit one) of each float
_MANTISSA_BITS: dict[str, int] = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}
#: the exponent bits of each float
_EXPONENT_BITS: dict[str, int] = {"float64": 11, "float32": 8, "float16": 5, "bfloat16": 8}

#: (k, s) for the corrected division in a float: operands outside [2**-k, 2**k] are scaled by 2**s towards it, where
#: the quotient, its split halves and the remainder's partial products are all normal floats
_DIVISION_RANGE: dict[str, tuple[int, int]] = {"float64": (400, 700), "float32": (57, 92)}


def _corrected_quotient(a: UOp, b: UOp) -> UOp:
    """a / b correctly rounded from MUL, ADD and RECIPROCAL: q = a * (1/b) rounds twice, so one Newton step on the
    exact remainder a - q*b corrects it. The remainder is exact: q*b is split into two floats without rounding
    (Dekker's product) and a - q*b cancels exactly because q*b is within a factor 2 of a. The operands are first
    scaled by powers of two into a range where nothing of that underflows or overflows, and the quotient back."""
    d = a.dtype
    k, s = _DIVISION_RANGE[d.name]
    small, large = UOp.const(d, 2.0 ** -k), UOp.const(d, 2.0 ** k)
    up, down, one, zero = UOp.const(d, 2.0 ** s), UOp.const(d, 2.0 ** -s), UOp.const(d, 1.0), UOp.const(d, 0.0)

    def into_range(v: UOp) -> tuple[UOp, UOp]:
        """v scaled towards [2**-k, 2**k] and the power of two it was scaled by (zero, inf and NaN stay as they
        are)."""
        magnitude = v.lt(zero).where(-v, v)
        factor = magnitude.lt(small).where(up, large.lt(magnitude).where(down, one))
        return v * factor, factor

    (a_in, a_factor), (b_in, b_factor) = into_range(a), into_range(b)
    inverse = b_in.alu(Ops.RECIPROCAL)
    quotient = a_in * inverse
    product, error = _exact_product(quotient, b_in)
    corrected = quotient + ((a_in - product) - error) * inverse
    # infinities and NaN make the correction NaN, and a zero quotient keeps its sign: the first quotient stands there
    scaled = ((corrected - corrected).eq(zero).alu(Ops.AND, quotient.ne(zero))).where(corrected, quotient)
    # a/b = scaled * b_factor / a_factor: two factors of the same direction are applied one after the other (their
    # product would overflow), opposite ones together (the first alone could round into a subnormal)
    a_undo = a_factor.alu(Ops.RECIPROCAL)
    same = b_factor.eq(a_undo).alu(Ops.AND, b_factor.ne(one))
    return same.where(scaled * b_factor * b_factor, scaled * (b_factor * a_undo))


def _exact_product(x: UOp, y: UOp) -> tuple[UOp, UOp]:
    """(p, e) with p = x*y rounded and p + e = x*y exactly (Dekker): each factor split in halves whose products
    are exact."""
    def split(v: UOp) -> tuple[UOp, UOp]:
        scaled = v * UOp.const(v.dtype, float(2 ** ((_MANTISSA_BITS[v.dtype.name] + 1) // 2) + 1))
        high = scaled - (scaled - v)
        return high, v - high
    (xh, xl), (yh, yl) = split(x), split(y)
    p = x * y
    return p, ((((xh * yh) - p) + xh * yl) + xl * yh) + xl * yl


def _pow2(b: UOp, dtype: DType) -> UOp:
    """2**b in `dtype` (wrapping) for 0 <= b < dtype's width: the product of 2**(2**k) over the set bits k of b."""
    out = UOp.const(dtype, 1)
    k = 0
    while (1 << k) < dtype.itemsize * 8:
        bit_clear = b.alu(Ops.AND, UOp.const(b.dtype, 1 << k)).eq(UOp.const(b.dtype, 0))
        out = out * bit_clear.where(UOp.const(dtype, 1), UOp.const(dtype, 1 << (1 << k)))
        k += 1
    return out


def _out_of_range(b: UOp, width: int) -> UOp:
    too_big = b.lt(UOp.const(b.dtype, width)).alu(Ops.XOR, UOp.const(dtypes.bool, True))
    return too_big if b.dtype.is_unsigned else b.lt(UOp.const(b.dtype, 0)).alu(Ops.OR, too_big)


def _shl(ctx: Renderer, x: UOp) -> UOp | None:
    if Ops.SHL in ctx.supported_ops:
        return None
    a, b = x.src
    return _out_of_range(b, a.dtype.itemsize * 8).where(UOp.const(x.dtype, 0), a * _pow2(b, a.dtype))


def _shr(ctx: Renderer, x: UOp) -> UOp | None:
    if Ops.SHR in ctx.supported_ops:
        return None
    a, b = x.src
    width = a.dtype.itemsize * 8
    zero = UOp.const(x.dtype, 0)
    if a.dtype.is_unsigned:
        return _out_of_range(b, width).where(zero, a // _pow2(b, a.dtype))
    negative = a.lt(zero)
    sign_fill = negative.where(UOp.const(x.dtype, -1), zero)  # what shifting out every bit leaves
    # b = width - 1 would divide by 2**(width-1), which wraps to MIN: that shift is the sign fill too
    beyond = _out_of_range(b, width - 1)
    q = a // _pow2(b, a.dtype)  # truncates toward zero; an arithmetic shift rounds down
    floor_q = negative.alu(Ops.AND, (q * _pow2(b, a.dtype)).ne(a)).where(q - UOp.const(x.dtype, 1), q)
    return beyond.where(sign_fill, floor_q)


def _wide(ctx: Renderer, x: UOp) -> DType:
    """The float a transcendental's polynomial runs in: float64, which every float's result rounds from."""
    if not ctx.supports_dtype(dtypes.float64):
        name = ctx.device or type(ctx).__name__
        raise NotImplementedError(f"renderer {name} lacks {x.op.name} and float64, which its decomposition computes "
                                  f"in: declare {x.op.name} in supported_ops, or float64 in supported_dtypes")
    return dtypes.float64


def _narrow(y: UOp, dtype: DType) -> UOp:
    # the 8-bit floats round from float32, as the reference does (an overflow to inf in float32 is NaN in fp8e4m3)
    return y.cast(dtypes.float32).cast(dtype) if dtype.itemsize == 1 else y.cast(dtype)


def _pow2_float(n: UOp) -> UOp:
    """2.0**n in float64 for an int64 n in [-1022, 1023], built from its bits (exponent n + 1023, mantissa 0)."""
    return ((n + UOp.const(dtypes.int64, 1023)) * UOp.const(dtypes.int64, 1 << 52)).bitcast(dtypes.float64)


#: 2**f = exp(f ln 2) by its Taylor series; for |f| <= 0.5 the 14th term is below float64's rounding
_EXP2_COEFFS = [math.log(2) ** k / math.factorial(k) for k in range(14)]


def _exp2(ctx: Renderer, x: UOp) -> UOp | None:
    if Ops.EXP2 in ctx.supported_ops:
        return None
    w = _wide(ctx, x)
    xw = x.src[0].cast(w)
    # past +-1100 the result is inf or 0 in every float; clamping keeps the integer part small (NaN passes through)
    c = xw.lt(UOp.const(w, -1100.0)).where(UOp.const(w, -1100.0), UOp.const(w, 1100.0).lt(xw).where(
        UOp.const(w, 1100.0), xw))
    n = (c + c.lt(UOp.const(w, 0.0)).where(UOp.const(w, -0.5), UOp.const(w, 0.5))).alu(Ops.TRUNC)
    f = c - n  # exact, in [-0.5, 0.5]
    p = UOp.const(w, _EXP2_COEFFS[-1])
    for coeff in reversed(_EXP2_COEFFS[:-1]):
        p = p * f + UOp.const(w, coeff)
    # 2**n in two halves that are each a normal float64; only the last product rounds (once, also into subnormals)
    ni = n.cast(dtypes.int64)
    half = ni // UOp.const(dtypes.int64, 2)
    y = p * _pow2_float(half) * _pow2_float(ni - half)
    return _narrow(xw.ne(xw).where(xw, y), x.dtype)


#: log2(m) = 2/ln 2 * atanh(s), s = (m - 1) / (m + 1): the odd series in s, |s| <= 0.172 for m in [0.707, 1.414]
_ATANH_TERMS = 12


def _log2(ctx: Renderer, x: UOp) -> UOp | None:
    if Ops.LOG2 in ctx.supported_ops:
        return None
    w = _wide(ctx, x)
    xw = x.src[0].cast(w)
    i64 = dtypes.int64
    # subnormals have no implicit leading bit: scale them into the normal range first
    tiny = xw.lt(UOp.const(w, 2.0 ** -1000))
    xs = tiny.where(xw * UOp.const(w, 2.0 ** 64), xw)
    bits = xs.bitcast(i64)
    e = bits // UOp.const(i64, 1 << 52) - UOp.const(i64, 1023)
    m = (bits.alu(Ops.AND, UOp.const(i64, (1 << 52) - 1)).alu(Ops.OR, UOp.const(i64, 1023 << 52))).bitcast(w)
    big = UOp.const(w, math.sqrt(2.0)).lt(m)
    m = big.where(m * UOp.const(w, 0.5), m)
    e = e + big.where(UOp.const(i64, 1), UOp.const(i64, 0)) - tiny.where(UOp.const(i64, 64), UOp.const(i64, 0))
    s = (m - UOp.const(w, 1.0)) * (m + UOp.const(w, 1.0)).alu(Ops.RECIPROCAL)
    s2 = s * s
    series = UOp.const(w, 1.0 / (2 * _ATANH_TERMS - 1))
    for k in range(_ATANH_TERMS - 2, -1, -1):
        series = series * s2 + UOp.const(w, 1.0 / (2 * k + 1))
    y = e.cast(w) + s * UOp.const(w, 2.0 / math.log(2.0)) * series
    zero, inf = UOp.const(w, 0.0), UOp.const(w, math.inf)
    # the special values: NaN and negatives give NaN, zeros -inf, inf itself
    y = xw.eq(inf).where(inf, xw.eq(zero).where(-inf, y))
    y = xw.lt(zero).alu(Ops.OR, xw.ne(xw)).where(UOp.const(w, math.nan), y)
    return _narrow(y, x.dtype)


#: the rewrite table; every rule reads the renderer (the rewrite's ctx) and fires only for an op it lacks
decompositions = PatternMatcher([
    (UPat(Ops.CMPNE, name="x"), _cmpne),
    (UPat(Ops.MAX, name="x"), _max),
    (UPat(Ops.FDIV, name="x"), _fdiv),
    (UPat(Ops.SHL, name="x"), _shl),
    (UPat(Ops.SHR, name="x"), _shr),
    (UPat(Ops.EXP2, name="x"), _exp2),
    (UPat(Ops.LOG2, name="x"), _log2),
])


def decompose(sink: UOp, renderer: Renderer) -> UOp:
    """The pass: `sink` with every ALU op outside `renderer.supported_ops` rewritten into ops inside it."""
    if GroupOp.ALU <= renderer.supported_ops:
        return sink  # the renderer writes every op: nothing to do (and nothing to walk)
    out = graph_rewrite(sink, decompositions, ctx=renderer)
    for u in out.toposort():
        _check_declared(u, renderer)
    return out


def decompose_program(program: list[UOp], renderer: Renderer) -> list[UOp]:
    """The same rules on a linearized program, for the ops the linearizer itself writes (a reduction's accumulate,
    `MAX(acc, x)` for a max): each is replaced by its decomposition, emitted just before its first use."""
    if GroupOp.ALU <= renderer.supported_ops:
        return program
    out: list[UOp] = []
    emitted: set[UOp] = set()
    replaced: dict[UOp, UOp] = {}
    for orig in program:
        u = orig
        if orig in replaced:  # emitted again (after a loop that computed it closed): the same replacement
            u = replaced[orig]
        elif any(s in replaced for s in orig.src):  # a user of a replaced node is rebuilt, and so are its users
            u = replaced[orig] = orig.replace(src=tuple(replaced.get(s, s) for s in orig.src))
        if u.op in GroupOp.ALU and u.op not in renderer.supported_ops:
            new = replaced[orig] = graph_rewrite(u, decompositions, ctx=renderer)
            for n in new.toposort():
                _check_declared(n, renderer)
                if n not in emitted:
                    out.append(n)
                    emitted.add(n)
            continue
        out.append(u)
        emitted.add(u)
    return out


def _check_declared(u: UOp, renderer: Renderer) -> None:
    if u.op in GroupOp.ALU and u.op not in renderer.supported_ops:
        name = renderer.device or type(renderer).__name__
        raise NotImplementedError(
            f"renderer {name} does not declare {u.op.name} ({u.src[0].dtype}) and no decomposition makes it from "
            f"the ops it declares ({', '.join(sorted(o.name for o in renderer.supported_ops & GroupOp.ALU))}): "
            f"add {u.op.name} to its supported_ops and render it, or add a rule to tinygrad/codegen/decompose.py")


__all__ = ["decompose", "decompose_program", "decompositions"]
