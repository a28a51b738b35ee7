"""Elementwise arithmetic, comparisons, bitwise ops and the Python operator overloads, with the numerics of pow and
fmod (exact residuals, integer powers). Unary math and the activation functions are in unary.py."""

from __future__ import annotations

import math
from typing import Self

from tinygrad.dtype import dtypes
from tinygrad.errors import ArgumentError, DTypeError
from tinygrad.gradient import define_gradient
from tinygrad.mixin.common import Scalar, TensorBase, TensorT, broadcast_shape, scalar_like, sign_bit
from tinygrad.uop.ops import Ops, UOp
from tinygrad.uop.placement import device_names

#: `Ops.ADD` is an attribute lookup through the enum's metaclass, several times a global's cost on Python 3.11
_ADD, _MUL = Ops.ADD, Ops.MUL


class ElementwiseMixin(TensorBase):
    __slots__ = ()

    # arithmetic
    def add(self, x: Self | Scalar, reverse: bool = False) -> Self:
        """`self + x`, elementwise with broadcasting and PyTorch's type promotion; `reverse` computes `x + self`.
        A Python number takes the tensor's dtype unless it is of a higher category (a float next to ints).

        Examples:
            >>> Tensor([1, 2, 3]).add(1).tolist()
            [2, 3, 4]
            >>> (Tensor([[1], [2]]) + Tensor([10, 20])).tolist()
            [[11, 21], [12, 22]]
        """
        return self._binop(Ops.ADD, x, reverse)

    def sub(self, x: Self | Scalar, reverse: bool = False) -> Self:
        """`self - x` elementwise, broadcasting; `reverse` computes `x - self`. Bool tensors cannot be subtracted.

        Examples:
            >>> Tensor([5, 6]).sub(1).tolist()
            [4, 5]
            >>> Tensor([5, 6]).sub(10, reverse=True).tolist()
            [5, 4]
        """
        a, b = self._broadcasted(x, reverse)
        if a.dtype.is_bool:
            raise DTypeError("subtraction of bool tensors is not supported; use logical_xor or cast to an integer")
        return a._derive(a.uop.alu(Ops.SUB, b.uop), b)

    def mul(self, x: Self | Scalar, reverse: bool = False) -> Self:
        """`self * x` elementwise, broadcasting; `reverse` computes `x * self`. Integer products wrap on overflow.

        Examples:
            >>> Tensor([1, 2, 3]).mul(2).tolist()
            [2, 4, 6]
            >>> Tensor([1, 2]).mul(0.5).tolist()
            [0.5, 1.0]
        """
        return self._binop(Ops.MUL, x, reverse)

    def div(self, x: Self | Scalar, reverse: bool = False, rounding_mode: str | None = None) -> Self:
        """True division `self / x` (integers give floats, as in PyTorch); `reverse` computes `x / self`.
        `rounding_mode="floor"` is `floordiv`, `"trunc"` rounds the quotient toward zero (integers stay integers).

        Examples:
            >>> Tensor([1, 2, 3]).div(2).tolist()
            [0.5, 1.0, 1.5]
            >>> Tensor([-7, 7]).div(2, rounding_mode="trunc").tolist()
            [-3, 3]
        """
        if rounding_mode == "floor":
            return self.floordiv(x, reverse)
        if rounding_mode == "trunc":
            a, b = self._broadcasted(x, reverse)
            if a.dtype.is_int:
                return a._derive(a.uop.alu(Ops.IDIV, b.uop), b)
            return a._float().div(b).trunc()
        if rounding_mode is not None:
            raise ArgumentError(f"rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")
        a, b = self._broadcasted(x, reverse)
        a, b = a._float(), b._float()
        return a._derive(a.uop.alu(Ops.FDIV, b.uop), b)

    def floordiv(self, x: Self | Scalar, reverse: bool = False) -> Self:
        """Python's and PyTorch's floor division; an integer divided by zero gives 0 (PyTorch raises).
        Floats follow PyTorch's definition (a - fmod(a, b)) / b, so that 5.0 // 0.1 is 49 and inf // 3 is NaN
        (a zero result may come out as 0.0 where PyTorch gives -0.0).

        Examples:
            >>> Tensor([-7, 7]).floordiv(2).tolist()
            [-4, 3]
            >>> (Tensor([7.5]) // 2).tolist()
            [3.0]
        """
        a, b = self._broadcasted(x, reverse)
        if a.dtype.is_float:
            r = _fmod_float(a, b)
            q = (a - r) / b
            q = ((r != 0) & ((r < 0) != (b < 0))).where(q - 1, q)
            fl = q.floor()  # q is a whole number up to rounding
            return (b == 0).where(a / b, (q - fl > 0.5).where(fl + 1, fl))
        q = a._derive(a.uop.alu(Ops.IDIV, b.uop), b)
        if a.dtype.is_unsigned:
            return q
        r = a._derive(a.uop.alu(Ops.MOD, b.uop), b)
        needs_fix = (r != 0) & ((a < 0) != (b < 0))
        return needs_fix.where(q - 1, q)

    def mod(self, x: Self | Scalar, reverse: bool = False) -> Self:
        """Python's and PyTorch's remainder: the result takes the sign of the divisor (a zero result keeps the
        dividend's sign, where PyTorch gives the divisor's). Floats are exact within fmod's range.

        Examples:
            >>> Tensor([-7, 7]).mod(3).tolist()
            [2, 1]
            >>> (Tensor([7, -7]) % -3).tolist()
            [-2, -1]
        """
        a, b = self._broadcasted(x, reverse)
        if a.dtype.is_float:
            r = _fmod_float(a, b)
            return ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)
        r = a._derive(a.uop.alu(Ops.MOD, b.uop), b)
        if a.dtype.is_unsigned:
            return r
        return ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)

    def fmod(self, x: Self | Scalar) -> Self:
        """C's fmod (PyTorch's torch.fmod): the remainder of truncated division, with the sign of the dividend.
        Floats are exact (as C's) while |a / b| < 2**29 (float32 and smaller, worked in float64 where the device
        has it; else 2**12) or 2**26 (float64). An integer divided by zero gives 0 (PyTorch raises).

        Examples:
            >>> Tensor([-7, 7]).fmod(3).tolist()
            [-1, 1]
            >>> Tensor([5.5]).fmod(2).tolist()
            [1.5]
        """
        a, b = self._broadcasted(x)
        if a.dtype.is_bool:
            raise DTypeError("fmod of bool tensors is not supported; cast to an integer")
        if a.dtype.is_float:
            return _fmod_float(a, b)
        return a._derive(a.uop.alu(Ops.MOD, b.uop), b)

    def pow(self, x: Self | Scalar, reverse: bool = False) -> Self:
        """Power as PyTorch: integer tensors give integers (wrapping on overflow; a negative exponent gives 0
        unless the base is 1 or -1), bool ** bool is logical, floats follow C's pow at 0, 1, inf and NaN.
        `reverse` computes `x ** self`.

        Examples:
            >>> Tensor([1, 2, 3]).pow(2).tolist()
            [1, 4, 9]
            >>> Tensor([4.0, 9.0]).pow(0.5).tolist()
            [2.0, 3.0]
            >>> (2 ** Tensor([1, 2, 3])).tolist()
            [2, 4, 8]
        """
        a, b = self._broadcasted(x, reverse)
        if a.dtype.is_bool:
            return a | b.logical_not()
        if not a.dtype.is_float:
            if not reverse and isinstance(x, int) and not isinstance(x, bool):
                return _int_pow_const(a, x)
            return _int_pow(a, b)
        if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool):
            if x == 2:
                return a * a
            if x == 1:
                return a
            if x == 0.5:
                return a.sqrt()
            if x == -1:
                return a.reciprocal()
        scalar_exp = x if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool) else None
        if a.dtype.itemsize == 2:  # 16-bit floats compute in float32 and round once
            return _pow_with_gradient(a.float(), b.float(), scalar_exp).cast(a.dtype)
        return _pow_with_gradient(a, b, scalar_exp)

    def maximum(self, x: Self | Scalar) -> Self:
        """The larger of self and `x` at each position, broadcasting (NaN wins, as PyTorch). Where both are equal
        the gradient is split evenly between them.

        Examples:
            >>> Tensor([1, 5, 3]).maximum(Tensor([4, 2, 3])).tolist()
            [4, 5, 3]
            >>> Tensor([-1.0, 2.0]).maximum(0).tolist()
            [0.0, 2.0]
        """
        return self._binop(Ops.MAX, x)

    def minimum(self, x: Self | Scalar) -> Self:
        """The smaller of self and `x` at each position, broadcasting; the gradient splits at ties as `maximum`'s.

        Examples:
            >>> Tensor([1, 5, 3]).minimum(Tensor([4, 2, 3])).tolist()
            [1, 2, 3]
        """
        a, b = self._broadcasted(x)
        if a.dtype.is_bool:
            return a & b
        if not a.dtype.is_float:  # negation would overflow at the bottom of the range (and wraps for unsigned)
            return (a < b).where(a, b)
        return -((-a).maximum(-b))  # ties split the gradient like maximum's, as PyTorch's minimum

    def where(self, x: Self | Scalar, y: Self | Scalar) -> Self:
        """`x` where self is true (nonzero), else `y`. A Python number next to a tensor takes the tensor's dtype
        unless it is of a higher category (a float next to an int tensor), as in PyTorch.

        Examples:
            >>> cond = Tensor([True, False, True])
            >>> cond.where(Tensor([1, 2, 3]), 0).tolist()
            [1, 0, 3]
            >>> (Tensor([-1.0, 2.0]) > 0).where(1.0, -1.0).tolist()
            [-1.0, 1.0]
        """
        cond = self if self.dtype.is_bool else self != 0
        if isinstance(x, TensorBase):
            xt, yt = x._broadcasted(y)
        elif isinstance(y, TensorBase):
            xt, yt = y._broadcasted(x, reverse=True)
        else:
            xt, yt = type(self)(UOp.const(dtypes.from_py([x, y]), x), device=cond.device)._broadcasted(y)
        shape = broadcast_shape(cond.shape, xt.shape)
        c, xt, yt = cond._broadcast_to(shape), xt._broadcast_to(shape), yt._broadcast_to(shape)
        return c._derive(c.uop.alu(Ops.WHERE, xt.uop, yt.uop), xt, yt)

    def lerp(self, end: Self | Scalar, weight: Self | Scalar) -> Self:
        """self + weight * (end - self), evaluated from the nearer end so that weight 1 gives exactly `end`.

        Examples:
            >>> Tensor([0.0, 10.0]).lerp(Tensor([10.0, 20.0]), 0.25).tolist()
            [2.5, 12.5]
        """
        start = self._float()
        diff = end - start
        if isinstance(weight, TensorBase):
            return (weight.abs() < 0.5).where(start + weight * diff, end - diff * (1 - weight))
        return start + diff * weight if abs(weight) < 0.5 else end - diff * (1 - weight)

    def copysign(self, other: Self | Scalar) -> Self:
        """|self| with the sign (bit) of `other`, -0.0 included; the result is float. The gradient is 0 where
        self is 0, and other gets none (as PyTorch).

        Examples:
            >>> Tensor([1, -2, 3]).copysign(Tensor([-1.0, 1.0, -0.0])).tolist()
            [-1.0, 2.0, -3.0]
        """
        a, b = self._broadcasted(other)
        a, b = a._float(), b._float()
        neg = sign_bit(b)
        mag = (neg != sign_bit(a)).where(-a, a)
        return (a == 0).where(neg.where(scalar_like(a, -0.0), scalar_like(a, 0.0)), mag)

    def logaddexp(self, other: Self | Scalar) -> Self:
        """log(exp(self) + exp(other)) without overflow: max + log1p(exp(-|self - other|)).

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 1000.0]).logaddexp(0.0).tolist()]
            [0.6931, 1000.0]
        """
        a, b = self._broadcasted(other)
        a, b = a._float(), b._float()
        d = (a == b).where(0.0, a - b)  # equal infinities would give inf - inf = NaN
        return a.maximum(b) + (-d.abs()).exp().log1p()

    # comparisons
    def __lt__(self, x: Self | Scalar) -> Self: return self._cmp(Ops.CMPLT, x)  # type: ignore[override]
    def __gt__(self, x: Self | Scalar) -> Self: return self._cmp(Ops.CMPLT, x, reverse=True)  # type: ignore[override]
    def __le__(self, x: Self | Scalar) -> Self: return self._cmp_or_equal(x, reverse=True)  # type: ignore[override]
    def __ge__(self, x: Self | Scalar) -> Self: return self._cmp_or_equal(x, reverse=False)  # type: ignore[override]
    def __eq__(self, x: object) -> Self: return self._cmp(Ops.CMPEQ, x)  # type: ignore[override, arg-type]
    def __ne__(self, x: object) -> Self: return self._cmp(Ops.CMPNE, x)  # type: ignore[override, arg-type]

    def _cmp(self, op: Ops, x: Self | Scalar, reverse: bool = False) -> Self:
        a, b = self._broadcasted(x, reverse)
        return type(self)(a.uop.alu(op, b.uop), device=self.device)

    def _cmp_or_equal(self, x: Self | Scalar, reverse: bool) -> Self:
        # self >= x (reverse: self <= x). For floats "not <" would call NaN comparisons true
        a, b = self._broadcasted(x)
        lo, hi = (b, a) if reverse else (a, b)  # lo >= hi, i.e. not lo < hi
        if a.dtype.is_float:
            return hi._cmp(Ops.CMPLT, lo) | (a == b)
        return lo._cmp(Ops.CMPLT, hi).logical_not()

    def eq(self, x: Self | Scalar) -> Self:
        """`self == x` elementwise, as a bool tensor (the `==` operator; `Tensor.__eq__` never compares identity).

        Examples:
            >>> Tensor([1, 2, 3]).eq(2).tolist()
            [False, True, False]
        """
        return self == x

    def ne(self, x: Self | Scalar) -> Self:
        """`self != x` elementwise, as a bool tensor; NaN differs from everything, itself included.

        Examples:
            >>> Tensor([1, 2, 3]).ne(Tensor([1, 0, 3])).tolist()
            [False, True, False]
        """
        return self != x

    def logical_not(self) -> Self:
        """True where the element is zero (or False), as a bool tensor.

        Examples:
            >>> Tensor([True, False]).logical_not().tolist()
            [False, True]
            >>> Tensor([0, 3]).logical_not().tolist()
            [True, False]
        """
        return type(self)(self.bool().uop.alu(Ops.CMPNE, UOp.const(dtypes.bool, True).reshape(
            (1,) * self.ndim).expand(self.shape)), device=self.device)

    def isnan(self) -> Self:
        """True where the element is NaN (never for integers and bool).

        Examples:
            >>> Tensor([1.0, math.nan]).isnan().tolist()
            [False, True]
        """
        return self != self if self.dtype.is_float else self.full_like(False, dtype=dtypes.bool)

    def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Self:
        """True where the element is +inf (if `detect_positive`) or -inf (if `detect_negative`).

        Examples:
            >>> t = Tensor([1.0, math.inf, -math.inf])
            >>> t.isinf().tolist(), t.isinf(detect_negative=False).tolist()
            ([False, True, True], [False, True, False])
        """
        out = self.full_like(False, dtype=dtypes.bool)
        if self.dtype.is_float:
            if detect_positive:
                out = out | (self == math.inf)
            if detect_negative:
                out = out | (self == -math.inf)
        return out

    def isfinite(self) -> Self:
        """True where the element is neither infinite nor NaN (always for integers and bool).

        Examples:
            >>> Tensor([1.0, math.inf, math.nan]).isfinite().tolist()
            [True, False, False]
        """
        if not self.dtype.is_float:
            return self.full_like(True, dtype=dtypes.bool)
        return (self < math.inf) & (self > -math.inf)  # false for NaN too

    def isclose(self, other: Self | Scalar, rtol: float = 1e-05, atol: float = 1e-08,
                equal_nan: bool = False) -> Self:
        """|self - other| <= atol + rtol * |other|, elementwise; equal values (infinities too) are close, NaN
        only with equal_nan. Integers compare in float32 as in PyTorch. Unlike PyTorch, mixed dtypes are
        promoted instead of refused.

        Examples:
            >>> Tensor([1.0, 1.1, math.nan]).isclose(Tensor([1.0, 1.0, math.nan])).tolist()
            [True, False, False]
            >>> Tensor([1.0, math.nan]).isclose(Tensor([1.05, math.nan]), atol=0.1, equal_nan=True).tolist()
            [True, True]
        """
        if rtol < 0 or atol < 0:
            raise ValueError(f"isclose needs non-negative tolerances, got rtol={rtol}, atol={atol}")
        a, b = self._broadcasted(other)
        close = a == b
        if rtol or atol:
            af, bf = a._float(), b._float()
            diff = (af - bf).abs()
            close = close | (diff.isfinite() & (diff <= atol + rtol * bf.abs()))
        if equal_nan and a.dtype.is_float:
            close = close | (a.isnan() & b.isnan())
        return close

    def allclose(self, other: Self | Scalar, rtol: float = 1e-05, atol: float = 1e-08,
                 equal_nan: bool = False) -> bool:
        """Whether every element is `isclose` to `other`, as a Python bool (this reads the result back).

        Examples:
            >>> Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0000001]))
            True
            >>> Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.1]))
            False
        """
        return bool(self.isclose(other, rtol, atol, equal_nan).all().item())

    def is_floating_point(self) -> bool:
        """Whether the dtype is a floating-point type (a Python bool).

        Examples:
            >>> Tensor([1.0]).is_floating_point(), Tensor([1]).is_floating_point()
            (True, False)
        """
        return self.dtype.is_float

    # bitwise
    def _bitop(self, op: Ops, x: Self | Scalar, reverse: bool = False) -> Self:
        a, b = self._broadcasted(x, reverse)
        if a.dtype.is_float:
            raise DTypeError(f"bitwise {op.name} needs integer or bool tensors, got {a.dtype}")
        return type(self)(a.uop.alu(op, b.uop), device=self.device)

    def bitwise_and(self, x: Self | Scalar) -> Self:
        """`self & x` for integer and bool tensors (the `&` operator); floats raise DTypeError.

        Examples:
            >>> Tensor([12, 10]).bitwise_and(6).tolist()
            [4, 2]
            >>> (Tensor([True, True]) & Tensor([True, False])).tolist()
            [True, False]
        """
        return self._bitop(Ops.AND, x)

    def bitwise_or(self, x: Self | Scalar) -> Self:
        """`self | x` for integer and bool tensors (the `|` operator).

        Examples:
            >>> Tensor([12, 10]).bitwise_or(1).tolist()
            [13, 11]
        """
        return self._bitop(Ops.OR, x)

    def bitwise_xor(self, x: Self | Scalar) -> Self:
        """`self ^ x` for integer and bool tensors (the `^` operator).

        Examples:
            >>> Tensor([12, 10]).bitwise_xor(6).tolist()
            [10, 12]
        """
        return self._bitop(Ops.XOR, x)

    def lshift(self, x: Self | int) -> Self:
        """Shift left; as PyTorch, a shift by the bit width or more (or by a negative amount) gives 0.

        Examples:
            >>> Tensor([1, 3]).lshift(2).tolist()
            [4, 12]
            >>> (Tensor([1]) << 32).tolist()
            [0]
        """
        return self._bitop(Ops.SHL, x)

    def rshift(self, x: Self | int) -> Self:
        """Arithmetic shift right for signed, logical for unsigned; a shift by the bit width or more (or by a
        negative amount) gives the sign fill (0 or -1), as PyTorch.

        Examples:
            >>> Tensor([16, -16]).rshift(2).tolist()
            [4, -4]
        """
        return self._bitop(Ops.SHR, x)

    def bitwise_not(self) -> Self:
        """`~self`: every bit flipped for integers (`-x - 1` for signed ones), logical not for bool.

        Examples:
            >>> Tensor([0, 5]).bitwise_not().tolist()
            [-1, -6]
            >>> (~Tensor([True, False])).tolist()
            [False, True]
        """
        if self.dtype.is_bool:
            return self.logical_not()
        if self.dtype.is_float:
            raise DTypeError(f"bitwise_not needs an integer or bool tensor, got {self.dtype}")
        return self ^ (int(self.dtype.max) if self.dtype.is_unsigned else -1)

    # operators (`+` and `*` call what add and mul do directly: one call less on every eager op)
    def __add__(self, x: Self | Scalar) -> Self: return self._binop(_ADD, x)
    def __radd__(self, x: Scalar) -> Self: return self._binop(_ADD, x, True)
    def __sub__(self, x: Self | Scalar) -> Self: return self.sub(x)
    def __rsub__(self, x: Scalar) -> Self: return self.sub(x, reverse=True)
    def __mul__(self, x: Self | Scalar) -> Self: return self._binop(_MUL, x)
    def __rmul__(self, x: Scalar) -> Self: return self._binop(_MUL, x, True)
    def __truediv__(self, x: Self | Scalar) -> Self: return self.div(x)
    def __rtruediv__(self, x: Scalar) -> Self: return self.div(x, reverse=True)
    def __floordiv__(self, x: Self | Scalar) -> Self: return self.floordiv(x)
    def __rfloordiv__(self, x: Scalar) -> Self: return self.floordiv(x, reverse=True)
    def __mod__(self, x: Self | Scalar) -> Self: return self.mod(x)
    def __rmod__(self, x: Scalar) -> Self: return self.mod(x, reverse=True)
    def __pow__(self, x: Self | Scalar) -> Self: return self.pow(x)
    def __rpow__(self, x: Scalar) -> Self: return self.pow(x, reverse=True)
    def __neg__(self) -> Self: return self.neg()
    def __matmul__(self, x: Self) -> Self: return self.matmul(x)
    def __rmatmul__(self, x: Self) -> Self: return x.matmul(self)
    def __and__(self, x: Self | Scalar) -> Self: return self.bitwise_and(x)
    def __or__(self, x: Self | Scalar) -> Self: return self.bitwise_or(x)
    def __xor__(self, x: Self | Scalar) -> Self: return self.bitwise_xor(x)
    def __rand__(self, x: Scalar) -> Self: return self.bitwise_and(x)
    def __ror__(self, x: Scalar) -> Self: return self.bitwise_or(x)
    def __rxor__(self, x: Scalar) -> Self: return self.bitwise_xor(x)
    def __lshift__(self, x: Self | int) -> Self: return self.lshift(x)
    def __rshift__(self, x: Self | int) -> Self: return self.rshift(x)
    def __invert__(self) -> Self: return self.bitwise_not()

    def __iadd__(self, x: Self | Scalar) -> Self: return self.assign(self + x)
    def __isub__(self, x: Self | Scalar) -> Self: return self.assign(self - x)
    def __imul__(self, x: Self | Scalar) -> Self: return self.assign(self * x)
    def __itruediv__(self, x: Self | Scalar) -> Self: return self.assign(self / x)


# ---- helpers of the composite functions ----


# ---- the numerics of pow and fmod ----

def _fmod_float(a: TensorT, b: TensorT) -> TensorT:
    """fmod on magnitudes, reflected back to a's sign (so that an exact multiple of -y gives -0.0, as C). The
    residual x - trunc(x / y) * y is exact while |x / y| < 2**29 for float32 (computed in float64) or 2**26 for
    float64 (2**12 for float32 on a device without float64); the rounded quotient can overshoot by one, which
    shows as a negative residual. Beyond that the result is within rounding of a - trunc(a / b) * b."""
    if a.dtype.itemsize == 2:
        return _fmod_float(a.float(), b.float()).cast(a.dtype)
    wide = a.dtype == dtypes.float32 and \
        all(type(a)._runtime.supports_dtype(d, dtypes.float64) for d in device_names(a.device))
    aw, bw = (a.cast(dtypes.float64), b.cast(dtypes.float64)) if wide else (a, b)
    a_neg = sign_bit(aw)
    x, y = a_neg.where(-aw, aw), (bw < 0).where(-bw, bw)
    t = (x / y).trunc()
    r = x - t * y if wide else _exact_residual(x, t, y)
    r = (r < 0).where(r + y, r)
    r = ((y == math.inf) & (x < math.inf)).where(x, r)  # trunc(x / inf) * inf would be 0 * inf
    return a_neg.where(-r, r).cast(a.dtype)


def _exact_residual(x: TensorT, t: TensorT, y: TensorT) -> TensorT:
    """x - t * y without rounding error for a whole t below 2**26 (float64) / 2**12 (float32) and t * y near x:
    y = yh + yl with yh holding y's leading half of the significand (bits masked off, so no multiply-add
    contraction can undo the split), so that t * yh and t * yl are exact, x - t * yh is exact (Sterbenz), and
    so is the last subtraction when its result is representable (it is, being the true remainder)."""
    wide = x.dtype == dtypes.float64
    ints, low_bits = (dtypes.int64, 27) if wide else (dtypes.int32, 12)
    yh = (y.bitcast(ints) & ~((1 << low_bits) - 1)).bitcast(y.dtype)
    return (x - t * yh) - t * (y - yh)


def _pow_with_gradient(base: TensorT, exp: TensorT, scalar_exp: float | None) -> TensorT:
    """`_float_pow` with the derivatives of pow itself, as PyTorch's: the chain rule through the formula's
    exp2/log2 and its special-case selects gives 0 where the true derivative is NaN (a negative base to a
    non-integer power) and NaN where it is finite (0 * inf at a zero or infinite base).
    d/dbase = e * b ** (e - 1), and 0 where e == 0 (x ** 0 is the constant 1);
    d/dexp = b ** e * ln(b), and 0 where b == 0 and e >= 0 (the value is constant there)."""
    out = _float_pow(base, exp)
    # The rule gets UOps, not tensors, and not `out`: CUSTOM_GRADIENTS keys on out.uop weakly, and a rule that
    # reaches its own key would keep the entry alive forever. pow rebuilds the same (hash-consed) node instead.
    make, device = type(out), out.device

    def rule(g_uop: UOp, b_uop: UOp, e_uop: UOp) -> tuple[UOp | None, ...]:
        g, b, e = make(g_uop, device=device), make(b_uop, device=device), make(e_uop, device=device)
        if scalar_exp is not None:  # through pow's shortcuts for a constant exponent (b ** 1 is b, b ** 1.5 ...)
            d_base = g.zeros_like() if scalar_exp == 0 else g * scalar_exp * b.pow(scalar_exp - 1)
        else:
            d_base = g * (e == 0).where(0.0, e * b.pow(e - 1))
        d_exp = g * ((b == 0) & (e >= 0)).where(0.0, b.pow(e) * b.log())
        return d_base.uop, d_exp.uop
    define_gradient(out.uop, (base.uop, exp.uop), rule)
    return out


def _float_pow(base: TensorT, exp: TensorT) -> TensorT:
    # |b|^e, with the sign fixed for negative bases raised to integer exponents. A zero base takes the log
    # of 1 and its value separately: log2(0) = -inf would make the gradient 0 * inf = NaN there
    is_zero = base == 0
    mag = (exp * is_zero.where(1.0, base.abs()).log2()).exp2()
    mag = is_zero.where((exp > 0).where(0.0, (exp < 0).where(math.inf, (exp != exp).where(exp, 1.0))), mag)
    is_int_exp = exp.trunc() == exp
    odd = (exp.abs() - (exp.abs() * 0.5).floor() * 2) == 1
    odd_power = is_int_exp & odd
    signed = (base < 0).where(is_int_exp.where(odd_power.where(-mag, mag), math.nan),
                              (odd_power & sign_bit(base)).where(-mag, mag))  # (-0.0) ** -1 is -inf
    # C's special cases: x ** 0 is 1 even for inf and NaN, 1 ** y is 1 even for inf and NaN, (-1) ** +-inf is 1,
    # and -inf to a non-integer power is inf or 0 (elsewhere the formula above already agrees)
    one = ((exp == 0) & ~base.isfinite()) | ((base == 1) & ~exp.isfinite()) | ((base == -1) & exp.isinf())
    neg_inf_base = (base == -math.inf) & exp.isfinite() & ~is_int_exp
    return one.where(1.0, neg_inf_base.where((exp > 0).where(math.inf, 0.0), signed))


def _int_pow_const(a: TensorT, e: int) -> TensorT:
    if e < 0:
        raise RuntimeError(f"integers to negative integer powers are not allowed (exponent {e}); cast to float first")
    out: TensorT | None = None
    base = a
    while e:
        if e & 1:
            out = base if out is None else out * base
        e >>= 1
        if e:
            base = base * base
    return out if out is not None else a.const_like(1)


def _int_pow(a: TensorT, b: TensorT) -> TensorT:
    """Square-and-multiply over every bit of the exponent, so that overflow wraps exactly as in PyTorch."""
    out, base, e = a.const_like(1), a, b
    for _ in range(b.dtype.bits - (0 if b.dtype.is_unsigned else 1)):
        out = ((e & 1) != 0).where(out * base, out)
        base, e = base * base, e >> 1
    if b.dtype.is_unsigned:
        return out
    odd = (b & 1) != 0
    negative_exp = (a == 1).where(1, (a == -1).where(odd.where(-1, 1), 0)).cast(a.dtype)
    return (b < 0).where(negative_exp, out)
