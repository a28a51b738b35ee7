"""Unary math (exp, log, trigonometric and hyperbolic functions, erf, rounding) and activation functions.

Everything beyond the primitive ALU ops is a composition of them, so gradients follow from the primitive rules.
Piecewise functions evaluate each piece on a "safe" input where it is not selected (for example exp of 0 instead
of exp of a large x), so that an unselected piece never feeds inf or NaN into the gradient (0 * inf = NaN).
Composite functions of 16-bit floats compute in float32 and round once at the end, as PyTorch does.
Transcendental functions the device lacks (erf, atan, log1p, expm1, ...) are series or fitted expansions
accurate to about 1e-7 relative in float32 and 1e-9 or better in float64.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tinygrad.dtype import dtypes
from tinygrad.errors import DTypeError
from tinygrad.mixin.common import Scalar, TensorBase, scalar_like, sign_bit
from tinygrad.uop.ops import Ops

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor

LN2 = math.log(2)
SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


class UnaryMixin(TensorBase):
    __slots__ = ()

    # unary math
    def neg(self: Tensor) -> Tensor:
        if self.dtype.is_bool:
            raise DTypeError("negation of a bool tensor is not supported; use logical_not()")
        return self._unop(Ops.NEG)

    def reciprocal(self: Tensor) -> Tensor: return self._float()._unop(Ops.RECIPROCAL)
    def sqrt(self: Tensor) -> Tensor: return self._float()._unop(Ops.SQRT)
    def rsqrt(self: Tensor) -> Tensor: return _in_float32(self, lambda x: x.sqrt().reciprocal())
    def exp2(self: Tensor) -> Tensor: return self._float()._unop(Ops.EXP2)
    def log2(self: Tensor) -> Tensor: return self._float()._unop(Ops.LOG2)
    def exp(self: Tensor) -> Tensor: return _in_float32(self, lambda x: (x * (1 / LN2)).exp2())
    def log(self: Tensor) -> Tensor: return _in_float32(self, lambda x: x.log2() * LN2)
    def log10(self: Tensor) -> Tensor: return _in_float32(self, lambda x: x.log2() * math.log10(2))
    def sin(self: Tensor) -> Tensor: return self._float()._unop(Ops.SIN)

    def cos(self: Tensor) -> Tensor:
        # 1 - 2 sin^2(x/2): x/2 is exact, where pi/2 - x would lose pi/2 entirely for large |x|
        def f(x: Tensor) -> Tensor:
            h = (x * 0.5).sin()
            return 1 - 2 * h * h
        return _in_float32(self, f)

    def tan(self: Tensor) -> Tensor: return _in_float32(self, lambda x: x.sin() / x.cos())

    def expm1(self: Tensor) -> Tensor:
        """exp(x) - 1, accurate near 0 (a Taylor series for |x| < 0.5)."""
        def f(x: Tensor) -> Tensor:
            small = (x < 0.5) & (x > -0.5)
            xs = small.where(x, 0.0)
            series = xs * _poly(xs, [1 / math.factorial(k) for k in range(1, 15 if _wide(x) else 10)])
            return small.where(series, small.where(0.0, x).exp() - 1)
        return _in_float32(self, f)

    def log1p(self: Tensor) -> Tensor:
        """log(1 + x), accurate near 0 (2 atanh(x / (2 + x)) as a series for |x| < 0.3)."""
        def f(x: Tensor) -> Tensor:
            small = (x < 0.3) & (x > -0.3)
            xs = small.where(x, 0.0)
            s = xs / (xs + 2)
            series = 2 * s * _poly(s * s, [1 / (2 * k + 1) for k in range(11 if _wide(x) else 6)])
            return small.where(series, (small.where(0.0, x) + 1).log())
        return _in_float32(self, f)

    def sinh(self: Tensor) -> Tensor:
        return _in_float32(self, lambda x: (x.expm1() - (-x).expm1()) * 0.5)

    def cosh(self: Tensor) -> Tensor:
        return _in_float32(self, lambda x: (x.exp() + (-x).exp()) * 0.5)

    def asinh(self: Tensor) -> Tensor:
        def f(a: Tensor) -> Tensor:  # a >= 0
            big = a > 1e8  # where a * a could overflow; asinh(a) = log(2a) to double precision there
            s = big.where(0.0, a)
            near = (s + s * s / (1 + (s * s + 1).sqrt())).log1p()
            return big.where(big.where(a, 1.0).log() + LN2, near)
        return _in_float32(self, lambda x: _odd(x, f))

    def acosh(self: Tensor) -> Tensor:
        def f(x: Tensor) -> Tensor:
            big = x > 1e8
            s = big.where(2.0, x)
            near = ((s - 1) + ((s - 1) * (s + 1)).sqrt()).log1p()
            return big.where(big.where(x, 1.0).log() + LN2, near)
        return _in_float32(self, f)

    def atanh(self: Tensor) -> Tensor:
        return _in_float32(self, lambda x: (2 * x / (1 - x)).log1p() * 0.5)

    def atan(self: Tensor) -> Tensor:
        def f(a: Tensor) -> Tensor:  # a >= 0: atan(a) = pi/2 - atan(1/a) beyond 1
            big = a > 1
            r = _atan_unit(big.where(1 / big.where(a, 1.0), a))
            return big.where(math.pi / 2 - r, r)
        return _in_float32(self, lambda x: _odd(x, f))

    def asin(self: Tensor) -> Tensor:
        # half-angle form: the atan argument stays in [-1, 1], and (1-x)(1+x) keeps its digits near |x| = 1
        return _in_float32(self, lambda x: 2 * (x / (1 + ((1 - x) * (1 + x)).sqrt())).atan())

    def acos(self: Tensor) -> Tensor:
        return _in_float32(self, lambda x: 2 * ((1 - x) / (1 + x)).sqrt().atan())

    def atan2(self: Tensor, other: Tensor | Scalar) -> Tensor:
        """The angle of the point (other, self), in [-pi, pi], with C's rules for zeros (signed) and
        infinities; PyTorch's torch.atan2(input=self, other). The gradient at (0, 0) is 0."""
        y, x = self._broadcasted(other)
        return _in_float32(y._float(), lambda yf: _atan2(yf, x.cast(yf.dtype)))

    arctan2 = atan2

    def erf(self: Tensor) -> Tensor:
        """The error function: a Taylor series below 0.5, above it 1 - erfc with erfc(x) = exp(-x^2 + p(x)),
        p a fitted Chebyshev expansion (relative error below 1e-9 on [0.5, 6]; erf is 1 beyond 6)."""
        return _in_float32(self, lambda x: _odd(x, _erf_nonneg))

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

    def round(self: Tensor, decimals: int = 0) -> Tensor:
        """Round half to even, as PyTorch (and numpy); `decimals` scales by 10**decimals first."""
        if not self.dtype.is_float:
            if decimals:
                raise DTypeError(f"round with decimals needs a float tensor, got {self.dtype}")
            return self
        if decimals:
            s = 10.0 ** abs(decimals)
            return _in_float32(self, lambda x: (x * s).round() / s if decimals > 0 else (x / s).round() * s)
        t = self.trunc()
        frac = (self - t).abs()  # exact: self and t share their leading bits
        odd = (t * 0.5).trunc() * 2 != t
        return ((frac > 0.5) | ((frac == 0.5) & odd)).where(t + self.sign(), t)

    def abs(self: Tensor) -> Tensor:
        if self.dtype.is_unsigned or self.dtype.is_bool:
            return self
        if self.dtype.is_float:
            return self * self.sign()  # so that the gradient is sign(x), 0 at 0 as in PyTorch
        return (self < 0).where(-self, self)

    def sign(self: Tensor) -> Tensor:
        return (self > 0).where(1, (self < 0).where(-1, 0)).cast(self.dtype) if not self.dtype.is_bool else self

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

    # activations. At a kink the gradient is PyTorch's: the x <= 0 side for the ReLU family, 0 at the
    # bounds of hardtanh/relu6/hardsigmoid
    def relu(self: Tensor) -> Tensor: return (self <= 0).where(0, self)  # NaN stays NaN

    def sigmoid(self: Tensor) -> Tensor:
        def f(x: Tensor) -> Tensor:
            neg = x < 0
            e = neg.where(x, -x).exp()  # exp(-|x|) never overflows
            p = 1 / (1 + e)
            return neg.where(e * p, p)
        return _in_float32(self._float(), f)

    def tanh(self: Tensor) -> Tensor:
        def f(a: Tensor) -> Tensor:  # a >= 0: tanh(a) = -e / (2 + e), e = expm1(-2a) in (-1, 0]
            e = (-2 * a).expm1()
            return -e / (2 + e)
        return _in_float32(self, lambda x: _odd(x, f))

    def leaky_relu(self: Tensor, neg_slope: float = 0.01) -> Tensor:
        return (self > 0).where(self, self * neg_slope)

    def elu(self: Tensor, alpha: float = 1.0) -> Tensor:
        def f(x: Tensor) -> Tensor:
            pos = x > 0
            return pos.where(x, alpha * pos.where(0.0, x).expm1())
        return _in_float32(self, f)

    def celu(self: Tensor, alpha: float = 1.0) -> Tensor:
        if alpha == 0:
            raise ValueError("celu with alpha=0 divides by zero; alpha must be nonzero")
        def f(x: Tensor) -> Tensor:
            pos = x > 0
            return pos.where(x, alpha * (pos.where(0.0, x) / alpha).expm1())
        return _in_float32(self, f)

    def selu(self: Tensor, alpha: float = SELU_ALPHA, gamma: float = SELU_SCALE) -> Tensor:
        return self.elu(alpha) * gamma

    def gelu(self: Tensor, approximate: str = "tanh") -> Tensor:
        """GELU. The default is tinygrad's tanh approximation (PyTorch's approximate='tanh'); pass
        approximate='none' for the exact x * Phi(x) that is PyTorch's default."""
        if approximate == "tanh":
            def f(x: Tensor) -> Tensor:
                return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
            return _in_float32(self, f)
        if approximate == "none":
            return _in_float32(self, lambda x: 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf()))
        raise ValueError(f"gelu approximate must be 'tanh' or 'none', got {approximate!r}")

    def quick_gelu(self: Tensor) -> Tensor: return self * (self * 1.702).sigmoid()
    def silu(self: Tensor) -> Tensor: return self * self.sigmoid()
    def swish(self: Tensor) -> Tensor: return self.silu()
    def mish(self: Tensor) -> Tensor: return _in_float32(self, lambda x: x * x.softplus().tanh())

    def softplus(self: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
        """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (PyTorch's rule)."""
        if beta == 0:
            raise ValueError("softplus with beta=0 divides by zero; beta must be nonzero")
        def f(x: Tensor) -> Tensor:
            big = x * beta > threshold
            return big.where(x, big.where(0.0, x * beta).exp().log1p() * (1 / beta))
        return _in_float32(self, f)

    def softsign(self: Tensor) -> Tensor: return self / (1 + self.abs())

    def logsigmoid(self: Tensor) -> Tensor:
        return _in_float32(self, lambda x: x.minimum(0) - (-x.abs()).exp().log1p())

    def hardsigmoid(self: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
        """clip(alpha x + beta, 0, 1), PyTorch's hardsigmoid with the defaults; the gradient is 0 at the bounds."""
        y = self * alpha + beta
        return (y <= 0).where(0.0, (y >= 1).where(1.0, y))

    def hardswish(self: Tensor) -> Tensor:
        """x * relu6(x + 3) / 6; the gradient is 0 at -3 and 1 at 3, as PyTorch."""
        return (self <= -3).where(0.0, (self >= 3).where(self, self * (self + 3) * (1 / 6)))

    def hardtanh(self: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
        """clip(x, min_val, max_val) with PyTorch's gradient: 0 at and beyond the bounds (clip passes it at them)."""
        return (self <= min_val).where(min_val, (self >= max_val).where(max_val, self))

    def relu6(self: Tensor) -> Tensor: return self.hardtanh(0.0, 6.0)


def _wide(x: Tensor) -> bool:
    return x.dtype == dtypes.float64


def _in_float32(x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """fn of x as a float, computed in float32 for 16-bit floats and rounded back once."""
    xf = x._float()
    if xf.dtype.itemsize == 2:
        return fn(xf.cast(dtypes.float32)).cast(xf.dtype)
    return fn(xf)


def _poly(x: Tensor, coeffs: Sequence[float]) -> Tensor:
    """coeffs[0] + coeffs[1] x + ... by Horner's rule."""
    acc = x * coeffs[-1] + coeffs[-2]
    for c in reversed(coeffs[:-2]):
        acc = acc * x + c
    return acc


def _odd(x: Tensor, f: Callable[[Tensor], Tensor]) -> Tensor:
    """An odd function from f on x >= 0. Reflecting with where (not abs/sign) keeps the slope at 0 nonzero."""
    neg = x < 0
    fx = f(neg.where(-x, x))
    return neg.where(-fx, fx)


def _atan_unit(a: Tensor) -> Tensor:
    """atan on [0, 1]: above tan(pi/8) shift by pi/4 (atan a = pi/4 + atan((a-1)/(a+1))), then a Taylor series
    on |z| <= tan(pi/8)."""
    hi = a > 0.41421356237309503
    z = hi.where((a - 1) / (a + 1), a)
    series = z * _poly(z * z, [(-1) ** k / (2 * k + 1) for k in range(21 if _wide(a) else 10)])
    return hi.where(math.pi / 4 + series, series)


def _atan2(y: Tensor, x: Tensor) -> Tensor:
    swap = y.abs() > x.abs()  # then use pi/2 - atan(x/y), so that every atan argument is in [-1, 1]
    both_zero, both_inf = (x == 0) & (y == 0), x.isinf() & y.isinf()
    special = both_zero | both_inf
    y_neg = sign_bit(y)
    pi = y_neg.where(scalar_like(y, -math.pi), scalar_like(y, math.pi))
    near_x = (special | swap).where(0.0, y) / (special | swap).where(1.0, x)
    at = near_x.atan()
    r1 = (x < 0).where(at + pi, at)  # not at + 0.0, which would lose the sign of -0.0
    half_pi = (y > 0).where(scalar_like(y, math.pi / 2), scalar_like(y, -math.pi / 2))
    r2 = half_pi - (swap.where(x, 0.0) / swap.where(y, 1.0)).atan()
    at_zero = sign_bit(x).where(pi, y_neg.where(scalar_like(y, -0.0), scalar_like(y, 0.0)))
    at_inf = (x > 0).where(scalar_like(y, math.pi / 4), scalar_like(y, 3 * math.pi / 4)) * y_neg.where(-1.0, 1.0)
    return both_zero.where(at_zero, both_inf.where(at_inf, swap.where(r2, r1)))


# erfc(x) = exp(-x^2 + sum c_k T_k(u)) on [0.5, 6], t = 1 / (1 + x/4) mapped onto u in [-1, 1] (fitted here with
# numpy's chebfit against math.erfc; relative error 7e-10, of the derivative 3e-8)
_ERFC_T = (0.4, 8 / 9)
_ERFC_CHEB = (-1.4389301781267501, 0.93830462390322089, 0.0085474662192389413, 0.0079009758689283366,
              -0.00087890668853878875, 6.5665664771139343e-05, -2.4070324712286327e-05, 3.6462019790569909e-06,
              -4.4285955270062637e-07, 1.0710834555656101e-07, -1.9155745479031633e-08, 2.8327675539380716e-09)
_ERF_TAYLOR = tuple((-1) ** n / (math.factorial(n) * (2 * n + 1)) * 2 / math.sqrt(math.pi) for n in range(13))


def _erf_nonneg(a: Tensor) -> Tensor:
    small = a < 0.5
    s = small.where(a, 0.0)
    series = s * _poly(s * s, _ERF_TAYLOR if _wide(a) else _ERF_TAYLOR[:8])
    b = (a > 6).where(6.0, small.where(0.5, a))  # NaN passes through; beyond 6 erf is 1 in float64
    lo, hi = _ERFC_T
    u = (2 / (1 + b * 0.25) - (hi + lo)) * (1 / (hi - lo))
    # Clenshaw's recurrence for the Chebyshev sum
    b1: Tensor | float = _ERFC_CHEB[-1]
    b2: Tensor | float = 0.0
    for c in reversed(_ERFC_CHEB[1:-1]):
        b1, b2 = 2 * u * b1 - b2 + c, b1
    cheb = u * b1 - b2 + _ERFC_CHEB[0]
    return small.where(series, 1 - (cheb - b * b).exp())
