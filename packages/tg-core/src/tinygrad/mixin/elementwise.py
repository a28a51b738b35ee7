"""Elementwise math, comparisons, bitwise ops, activations and the Python operator overloads."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tinygrad.dtype import dtypes
from tinygrad.mixin.common import Scalar, broadcast_shape
from tinygrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor
else:
    Tensor = None  # bound to the real class by tinygrad.tensor once it is defined (the modules import each other)


class ElementwiseMixin:
    __slots__ = ()

    # arithmetic
    def add(self: Tensor, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
        return self._binop(Ops.ADD, x, reverse)

    def sub(self: Tensor, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if a.dtype.is_bool:
            raise TypeError("subtraction of bool tensors is not supported; use logical_xor or cast to an integer")
        return a._derive(a.uop.alu(Ops.SUB, b.uop), b)

    def mul(self: Tensor, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
        return self._binop(Ops.MUL, x, reverse)

    def div(self: Tensor, x: Tensor | Scalar, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
        if rounding_mode == "floor":
            return self.floordiv(x, reverse)
        if rounding_mode == "trunc":
            a, b = self._broadcasted(x, reverse)
            if a.dtype.is_int:
                return a._derive(a.uop.alu(Ops.IDIV, b.uop), b)
            return a._float().div(b).trunc()
        if rounding_mode is not None:
            raise ValueError(f"rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")
        a, b = self._broadcasted(x, reverse)
        a, b = a._float(), b._float()
        return a._derive(a.uop.alu(Ops.FDIV, b.uop), b)

    def floordiv(self: Tensor, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
        """Python's and PyTorch's floor division; an integer divided by zero gives 0 (PyTorch raises)."""
        a, b = self._broadcasted(x, reverse)
        if a.dtype.is_float:
            return a.div(b).floor()
        q = a._derive(a.uop.alu(Ops.IDIV, b.uop), b)
        if a.dtype.is_unsigned:
            return q
        r = a._derive(a.uop.alu(Ops.MOD, b.uop), b)
        needs_fix = (r != 0) & ((a < 0) != (b < 0))
        return needs_fix.where(q - 1, q)

    def mod(self: Tensor, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
        """Python's and PyTorch's remainder: the result takes the sign of the divisor."""
        a, b = self._broadcasted(x, reverse)
        if a.dtype.is_float:
            return a - (a / b).floor() * b
        r = a._derive(a.uop.alu(Ops.MOD, b.uop), b)
        if a.dtype.is_unsigned:
            return r
        return ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)

    def pow(self: Tensor, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
        if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool):
            if x == 2:
                return self * self
            if x == 1:
                return self
            if x == 0.5:
                return self.sqrt()
            if x == -1:
                return self.reciprocal()
        base, exp = self._broadcasted(x, reverse)
        base, exp = base._float(), exp._float()
        # |b|^e, with the sign fixed for negative bases raised to integer exponents. A zero base takes the log
        # of 1 and its value separately: log2(0) = -inf would make the gradient 0 * inf = NaN there
        is_zero = base == 0
        mag = (exp * is_zero.where(1.0, base.abs()).log2()).exp2()
        mag = is_zero.where((exp > 0).where(0.0, (exp == 0).where(1.0, math.inf)), mag)
        is_int_exp = exp.trunc() == exp
        odd = (exp.abs() - (exp.abs() / 2).floor() * 2) == 1
        neg = base < 0
        signed = neg.where(is_int_exp.where(odd.where(-mag, mag), math.nan), mag)
        return ((base == 0) & (exp == 0)).where(1.0, signed)

    def maximum(self: Tensor, x: Tensor | Scalar) -> Tensor:
        return self._binop(Ops.MAX, x)

    def minimum(self: Tensor, x: Tensor | Scalar) -> Tensor:
        a, b = self._broadcasted(x)
        if a.dtype.is_bool:
            return a & b
        if a.dtype.is_unsigned:  # negation wraps around for unsigned ints: mirror at the top of the range instead
            top = int(a.dtype.max)
            return (top - (top - a).maximum(top - b)).cast(a.dtype)
        return -((-a).maximum(-b))

    def where(self: Tensor, x: Tensor | Scalar, y: Tensor | Scalar) -> Tensor:
        cond = self if self.dtype.is_bool else self != 0
        if isinstance(x, Tensor) or not isinstance(y, Tensor):
            xt = x if isinstance(x, Tensor) else cond._const_operand(x).cast(
                y.dtype if isinstance(y, Tensor) and not isinstance(x, float) else dtypes.from_py(x))
            xt, yt = xt._broadcasted(y)
        else:
            yt = y
            xt, yt = yt._broadcasted(x, reverse=True)
        shape = broadcast_shape(cond.shape, xt.shape)
        c, xt, yt = cond._broadcast_to(shape), xt._broadcast_to(shape), yt._broadcast_to(shape)
        return c._derive(c.uop.alu(Ops.WHERE, xt.uop, yt.uop), xt, yt)

    # comparisons
    def __lt__(self: Tensor, x: Tensor | Scalar) -> Tensor: return self._cmp(Ops.CMPLT, x)  # type: ignore[override]
    def __gt__(self: Tensor, x: Tensor | Scalar) -> Tensor: return self._cmp(Ops.CMPLT, x, reverse=True)  # type: ignore[override]
    def __le__(self: Tensor, x: Tensor | Scalar) -> Tensor: return (self > x).logical_not()  # type: ignore[override]
    def __ge__(self: Tensor, x: Tensor | Scalar) -> Tensor: return (self < x).logical_not()  # type: ignore[override]
    def __eq__(self: Tensor, x: object) -> Tensor: return self._cmp(Ops.CMPEQ, x)  # type: ignore[override, arg-type]
    def __ne__(self: Tensor, x: object) -> Tensor: return self._cmp(Ops.CMPNE, x)  # type: ignore[override, arg-type]

    def _cmp(self: Tensor, op: Ops, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        return Tensor(a.uop.alu(op, b.uop), device=self.device)

    def eq(self: Tensor, x: Tensor | Scalar) -> Tensor: return self == x
    def ne(self: Tensor, x: Tensor | Scalar) -> Tensor: return self != x

    def logical_not(self: Tensor) -> Tensor:
        return Tensor(self.bool().uop.alu(Ops.CMPNE, UOp.const(dtypes.bool, True).reshape(
            (1,) * self.ndim).expand(self.shape)), device=self.device)

    # bitwise
    def _bitop(self: Tensor, op: Ops, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if a.dtype.is_float:
            raise TypeError(f"bitwise {op.name} needs integer or bool tensors, got {a.dtype}")
        return Tensor(a.uop.alu(op, b.uop), device=self.device)

    def bitwise_and(self: Tensor, x: Tensor | Scalar) -> Tensor: return self._bitop(Ops.AND, x)
    def bitwise_or(self: Tensor, x: Tensor | Scalar) -> Tensor: return self._bitop(Ops.OR, x)
    def bitwise_xor(self: Tensor, x: Tensor | Scalar) -> Tensor: return self._bitop(Ops.XOR, x)
    def lshift(self: Tensor, x: Tensor | int) -> Tensor: return self._bitop(Ops.SHL, x)
    def rshift(self: Tensor, x: Tensor | int) -> Tensor: return self._bitop(Ops.SHR, x)

    # unary math
    def neg(self: Tensor) -> Tensor:
        if self.dtype.is_bool:
            raise TypeError("negation of a bool tensor is not supported; use logical_not()")
        return self._unop(Ops.NEG)

    def reciprocal(self: Tensor) -> Tensor: return self._float()._unop(Ops.RECIPROCAL)
    def sqrt(self: Tensor) -> Tensor: return self._float()._unop(Ops.SQRT)
    def rsqrt(self: Tensor) -> Tensor: return self.sqrt().reciprocal()
    def exp2(self: Tensor) -> Tensor: return self._float()._unop(Ops.EXP2)
    def log2(self: Tensor) -> Tensor: return self._float()._unop(Ops.LOG2)
    def exp(self: Tensor) -> Tensor: return (self._float() * (1 / math.log(2))).exp2()
    def log(self: Tensor) -> Tensor: return self.log2() * math.log(2)
    def sin(self: Tensor) -> Tensor: return self._float()._unop(Ops.SIN)
    def cos(self: Tensor) -> Tensor: return ((math.pi / 2) - self._float()).sin()
    def tan(self: Tensor) -> Tensor: return self.sin() / self.cos()

    def trunc(self: Tensor) -> Tensor:
        return self if not self.dtype.is_float else self._unop(Ops.TRUNC)

    def floor(self: Tensor) -> Tensor:
        if not self.dtype.is_float:
            return self
        t = self.trunc()
        return (self < t).where(t - 1, t)

    def ceil(self: Tensor) -> Tensor:
        if not self.dtype.is_float:
            return self
        t = self.trunc()
        return (self > t).where(t + 1, t)

    def abs(self: Tensor) -> Tensor:
        if self.dtype.is_unsigned or self.dtype.is_bool:
            return self
        if self.dtype.is_float:
            return self * self.sign()  # so that the gradient is sign(x), 0 at 0 as in PyTorch
        return (self < 0).where(-self, self)

    def sign(self: Tensor) -> Tensor:
        return (self > 0).where(1, (self < 0).where(-1, 0)).cast(self.dtype) if not self.dtype.is_bool else self

    def relu(self: Tensor) -> Tensor: return (self > 0).where(self, 0)
    def sigmoid(self: Tensor) -> Tensor: return (1 + (-self._float()).exp()).reciprocal()
    def tanh(self: Tensor) -> Tensor: return 2.0 * (2.0 * self._float()).sigmoid() - 1.0
    def square(self: Tensor) -> Tensor: return self * self
    def clip(self: Tensor, min_: Scalar | None = None, max_: Scalar | None = None) -> Tensor:
        # where, not maximum/minimum: at a bound the gradient passes through (PyTorch's clamp) instead of splitting
        out = self
        if min_ is not None:
            out = (out < min_).where(min_, out)
        if max_ is not None:
            out = (out > max_).where(max_, out)
        return out
    clamp = clip

    # operators
    def __add__(self: Tensor, x: Tensor | Scalar) -> Tensor: return self.add(x)
    def __radd__(self: Tensor, x: Scalar) -> Tensor: return self.add(x, reverse=True)
    def __sub__(self: Tensor, x: Tensor | Scalar) -> Tensor: return self.sub(x)
    def __rsub__(self: Tensor, x: Scalar) -> Tensor: return self.sub(x, reverse=True)
    def __mul__(self: Tensor, x: Tensor | Scalar) -> Tensor: return self.mul(x)
    def __rmul__(self: Tensor, x: Scalar) -> Tensor: return self.mul(x, reverse=True)
    def __truediv__(self: Tensor, x: Tensor | Scalar) -> Tensor: return self.div(x)
    def __rtruediv__(self: Tensor, x: Scalar) -> Tensor: return self.div(x, reverse=True)
    def __floordiv__(self: Tensor, x: Tensor | Scalar) -> Tensor: return self.floordiv(x)
    def __rfloordiv__(self: Tensor, x: Scalar) -> Tensor: return self.floordiv(x, reverse=True)
    def __mod__(self: Tensor, x: Tensor | Scalar) -> Tensor: return self.mod(x)
    def __rmod__(self: Tensor, x: Scalar) -> Tensor: return self.mod(x, reverse=True)
    def __pow__(self: Tensor, x: Tensor | Scalar) -> Tensor: return self.pow(x)
    def __rpow__(self: Tensor, x: Scalar) -> Tensor: return self.pow(x, reverse=True)
    def __neg__(self: Tensor) -> Tensor: return self.neg()
    def __matmul__(self: Tensor, x: Tensor) -> Tensor: return self.matmul(x)
    def __rmatmul__(self: Tensor, x: Tensor) -> Tensor: return x.matmul(self)
    def __and__(self: Tensor, x: Tensor | Scalar) -> Tensor: return self.bitwise_and(x)
    def __or__(self: Tensor, x: Tensor | Scalar) -> Tensor: return self.bitwise_or(x)
    def __xor__(self: Tensor, x: Tensor | Scalar) -> Tensor: return self.bitwise_xor(x)
    def __rand__(self: Tensor, x: Scalar) -> Tensor: return self.bitwise_and(x)
    def __ror__(self: Tensor, x: Scalar) -> Tensor: return self.bitwise_or(x)
    def __rxor__(self: Tensor, x: Scalar) -> Tensor: return self.bitwise_xor(x)
    def __lshift__(self: Tensor, x: Tensor | int) -> Tensor: return self.lshift(x)
    def __rshift__(self: Tensor, x: Tensor | int) -> Tensor: return self.rshift(x)
    def __invert__(self: Tensor) -> Tensor:
        return self.logical_not() if self.dtype.is_bool else self ^ -1 if not self.dtype.is_unsigned \
            else self ^ int(self.dtype.max)

    def __iadd__(self: Tensor, x: Tensor | Scalar) -> Tensor: return self.assign(self + x)
    def __isub__(self: Tensor, x: Tensor | Scalar) -> Tensor: return self.assign(self - x)
    def __imul__(self: Tensor, x: Tensor | Scalar) -> Tensor: return self.assign(self * x)
    def __itruediv__(self: Tensor, x: Tensor | Scalar) -> Tensor: return self.assign(self / x)
