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
from typing import Self

from tinygrad.dtype import dtypes
from tinygrad.errors import ArgumentError, DTypeError
from tinygrad.mixin.common import Scalar, TensorBase, TensorT, scalar_like, sign_bit
from tinygrad.uop.ops import Ops

LN2 = math.log(2)
SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


class UnaryMixin(TensorBase):
    __slots__ = ()

    # unary math
    def neg(self) -> Self:
        """`-self` elementwise (integers wrap at their minimum); bool tensors raise DTypeError (use `logical_not`).

        Examples:
            >>> Tensor([1, -2, 0]).neg().tolist()
            [-1, 2, 0]
        """
        if self.dtype.is_bool:
            raise DTypeError("negation of a bool tensor is not supported; use logical_not()")
        return self._unop(Ops.NEG)

    def reciprocal(self) -> Self:
        """`1 / self` elementwise, as a float (integers are cast to `default_float` first).

        Examples:
            >>> Tensor([1.0, 2.0, 4.0]).reciprocal().tolist()
            [1.0, 0.5, 0.25]
        """
        return self._float()._unop(Ops.RECIPROCAL)

    def sqrt(self) -> Self:
        """The square root, as a float; NaN for negative values.

        Examples:
            >>> Tensor([1, 4, 9]).sqrt().tolist()
            [1.0, 2.0, 3.0]
        """
        return self._float()._unop(Ops.SQRT)

    def rsqrt(self) -> Self:
        """`1 / sqrt(self)`, as a float.

        Examples:
            >>> Tensor([1.0, 4.0, 16.0]).rsqrt().tolist()
            [1.0, 0.5, 0.25]
        """
        return _in_float32(self, lambda x: x.sqrt().reciprocal())

    def exp2(self) -> Self:
        """`2 ** self`, as a float.

        Examples:
            >>> Tensor([0.0, 1.0, 3.0, -1.0]).exp2().tolist()
            [1.0, 2.0, 8.0, 0.5]
        """
        return self._float()._unop(Ops.EXP2)

    def log2(self) -> Self:
        """The base-2 logarithm, as a float (-inf at 0, NaN below).

        Examples:
            >>> Tensor([1.0, 2.0, 8.0, 0.5]).log2().tolist()
            [0.0, 1.0, 3.0, -1.0]
        """
        return self._float()._unop(Ops.LOG2)

    def exp(self) -> Self:
        """The exponential `e ** self`, as a float (computed as exp2(x / ln 2); half floats in float32).

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 1.0, -1.0]).exp().tolist()]
            [1.0, 2.7183, 0.3679]
        """
        return _in_float32(self, lambda x: (x * (1 / LN2)).exp2())

    def log(self) -> Self:
        """The natural logarithm, as a float (-inf at 0, NaN below).

        Examples:
            >>> [round(v, 4) for v in Tensor([1.0, math.e, 10.0]).log().tolist()]
            [0.0, 1.0, 2.3026]
        """
        return _in_float32(self, lambda x: x.log2() * LN2)

    def log10(self) -> Self:
        """The base-10 logarithm, as a float.

        Examples:
            >>> [round(v, 4) for v in Tensor([1.0, 10.0, 1000.0]).log10().tolist()]
            [0.0, 1.0, 3.0]
        """
        return _in_float32(self, lambda x: x.log2() * math.log10(2))

    def sin(self) -> Self:
        """The sine (radians), as a float.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, math.pi / 2, 1.0]).sin().tolist()]
            [0.0, 1.0, 0.8415]
        """
        return self._float()._unop(Ops.SIN)

    def cos(self) -> Self:
        """The cosine (radians), as a float; computed as 1 - 2 sin^2(x/2), accurate for large |x| too.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, math.pi, 1.0]).cos().tolist()]
            [1.0, -1.0, 0.5403]
        """
        # 1 - 2 sin^2(x/2): x/2 is exact, where pi/2 - x would lose pi/2 entirely for large |x|
        def f(x: Self) -> Self:
            h = (x * 0.5).sin()
            return 1 - 2 * h * h
        return _in_float32(self, f)

    def tan(self) -> Self:
        """The tangent (radians), as a float: sin / cos.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, math.pi / 4, 1.0]).tan().tolist()]
            [0.0, 1.0, 1.5574]
        """
        return _in_float32(self, lambda x: x.sin() / x.cos())

    def expm1(self) -> Self:
        """exp(x) - 1, accurate near 0 (a Taylor series for |x| < 0.5).

        Examples:
            >>> Tensor([0.0, 1e-10]).expm1().tolist() == [0.0, Tensor([1e-10]).item()]
            True
            >>> [round(v, 4) for v in Tensor([1.0]).expm1().tolist()]
            [1.7183]
        """
        def f(x: Self) -> Self:
            small = (x < 0.5) & (x > -0.5)
            xs = small.where(x, 0.0)
            series = xs * _poly(xs, [1 / math.factorial(k) for k in range(1, 15 if _wide(x) else 10)])
            return small.where(series, small.where(0.0, x).exp() - 1)
        return _in_float32(self, f)

    def log1p(self) -> Self:
        """log(1 + x), accurate near 0 (2 atanh(x / (2 + x)) as a series for |x| < 0.3).

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 1.0, math.e - 1]).log1p().tolist()]
            [0.0, 0.6931, 1.0]
        """
        def f(x: Self) -> Self:
            small = (x < 0.3) & (x > -0.3)
            xs = small.where(x, 0.0)
            s = xs / (xs + 2)
            series = 2 * s * _poly(s * s, [1 / (2 * k + 1) for k in range(11 if _wide(x) else 6)])
            return small.where(series, (small.where(0.0, x) + 1).log())
        return _in_float32(self, f)

    def sinh(self) -> Self:
        """The hyperbolic sine, as a float.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 1.0, -1.0]).sinh().tolist()]
            [0.0, 1.1752, -1.1752]
        """
        return _in_float32(self, lambda x: (x.expm1() - (-x).expm1()) * 0.5)

    def cosh(self) -> Self:
        """The hyperbolic cosine, as a float.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 1.0]).cosh().tolist()]
            [1.0, 1.5431]
        """
        return _in_float32(self, lambda x: (x.exp() + (-x).exp()) * 0.5)

    def asinh(self) -> Self:
        """The inverse hyperbolic sine, as a float (accurate for large |x|, where x * x would overflow).

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 1.0, -1.0]).asinh().tolist()]
            [0.0, 0.8814, -0.8814]
        """
        def f(a: Self) -> Self:  # a >= 0
            big = a > 1e8  # where a * a could overflow; asinh(a) = log(2a) to double precision there
            s = big.where(0.0, a)
            near = (s + s * s / (1 + (s * s + 1).sqrt())).log1p()
            return big.where(big.where(a, 1.0).log() + LN2, near)
        return _in_float32(self, lambda x: _odd(x, f))

    def acosh(self) -> Self:
        """The inverse hyperbolic cosine, as a float (NaN below 1).

        Examples:
            >>> [round(v, 4) for v in Tensor([1.0, 2.0]).acosh().tolist()]
            [0.0, 1.317]
        """
        def f(x: Self) -> Self:
            big = x > 1e8
            s = big.where(2.0, x)
            near = ((s - 1) + ((s - 1) * (s + 1)).sqrt()).log1p()
            return big.where(big.where(x, 1.0).log() + LN2, near)
        return _in_float32(self, f)

    def atanh(self) -> Self:
        """The inverse hyperbolic tangent, as a float (±inf at ±1, NaN beyond).

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 0.5]).atanh().tolist()]
            [0.0, 0.5493]
        """
        return _in_float32(self, lambda x: (2 * x / (1 - x)).log1p() * 0.5)

    def atan(self) -> Self:
        """The arctangent, in (-pi/2, pi/2), as a float.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 1.0, -math.inf]).atan().tolist()]
            [0.0, 0.7854, -1.5708]
        """
        def f(a: Self) -> Self:  # a >= 0: atan(a) = pi/2 - atan(1/a) beyond 1
            big = a > 1
            r = _atan_unit(big.where(1 / big.where(a, 1.0), a))
            return big.where(math.pi / 2 - r, r)
        return _in_float32(self, lambda x: _odd(x, f))

    def asin(self) -> Self:
        """The arcsine, in [-pi/2, pi/2], as a float (NaN outside [-1, 1]).

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 0.5, 1.0]).asin().tolist()]
            [0.0, 0.5236, 1.5708]
        """
        # half-angle form: the atan argument stays in [-1, 1], and (1-x)(1+x) keeps its digits near |x| = 1
        return _in_float32(self, lambda x: 2 * (x / (1 + ((1 - x) * (1 + x)).sqrt())).atan())

    def acos(self) -> Self:
        """The arccosine, in [0, pi], as a float (NaN outside [-1, 1]).

        Examples:
            >>> [round(v, 4) for v in Tensor([1.0, 0.0, -1.0]).acos().tolist()]
            [0.0, 1.5708, 3.1416]
        """
        return _in_float32(self, lambda x: 2 * ((1 - x) / (1 + x)).sqrt().atan())

    def atan2(self, other: Self | Scalar) -> Self:
        """The angle of the point (other, self), in [-pi, pi], with C's rules for zeros (signed) and
        infinities; PyTorch's torch.atan2(input=self, other). The gradient at (0, 0) is 0. `arctan2` is an alias.

        Examples:
            >>> [round(v, 4) for v in Tensor([1.0, 1.0, -1.0]).atan2(Tensor([1.0, -1.0, 0.0])).tolist()]
            [0.7854, 2.3562, -1.5708]
            >>> [round(v, 4) for v in Tensor([0.0]).arctan2(Tensor([-1.0])).tolist()]
            [3.1416]
        """
        y, x = self._broadcasted(other)
        return _in_float32(y._float(), lambda yf: _atan2(yf, x.cast(yf.dtype)))

    arctan2 = atan2
    """Alias of `atan2` (numpy's name).

    Examples:
        >>> [round(v, 4) for v in Tensor([1.0, -1.0]).arctan2(Tensor([0.0, 0.0])).tolist()]
        [1.5708, -1.5708]
    """

    def erf(self) -> Self:
        """The error function: a Taylor series below 0.5, above it 1 - erfc with erfc(x) = exp(-x^2 + p(x)),
        p a fitted Chebyshev expansion (relative error below 1e-9 on [0.5, 6]; erf is 1 beyond 6).

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 0.5, -1.0, 10.0]).erf().tolist()]
            [0.0, 0.5205, -0.8427, 1.0]
        """
        return _in_float32(self, lambda x: _odd(x, _erf_nonneg))

    def trunc(self) -> Self:
        """Round toward zero (floats; integer tensors are returned as they are).

        Examples:
            >>> Tensor([1.7, -1.7, 2.0]).trunc().tolist()
            [1.0, -1.0, 2.0]
        """
        return self if not self.dtype.is_float else self._unop(Ops.TRUNC)

    def floor(self) -> Self:
        """Round down to a whole number (floats; integer tensors are returned as they are).

        Examples:
            >>> Tensor([1.7, -1.2, 2.0]).floor().tolist()
            [1.0, -2.0, 2.0]
        """
        if not self.dtype.is_float:
            return self
        t = self.trunc()
        return (self < t).where(t - 1, t)

    def ceil(self) -> Self:
        """Round up to a whole number (floats; integer tensors are returned as they are).

        Examples:
            >>> Tensor([1.2, -1.7, 2.0]).ceil().tolist()
            [2.0, -1.0, 2.0]
        """
        if not self.dtype.is_float:
            return self
        t = self.trunc()
        return (self > t).where(t + 1, t)

    def round(self, decimals: int = 0) -> Self:
        """Round half to even, as PyTorch (and numpy); `decimals` scales by 10**decimals first.

        Examples:
            >>> Tensor([0.5, 1.5, 2.5, -0.5, 2.6]).round().tolist()
            [0.0, 2.0, 2.0, -0.0, 3.0]
            >>> Tensor([1.25, 3.75], dtype=dtypes.float64).round(decimals=1).tolist()
            [1.2, 3.8]
        """
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

    def abs(self) -> Self:
        """The absolute value (integers keep their dtype; the most negative integer stays negative, as it wraps).
        The gradient at 0 is 0, as PyTorch's.

        Examples:
            >>> Tensor([-2, 0, 3]).abs().tolist()
            [2, 0, 3]
        """
        if self.dtype.is_unsigned or self.dtype.is_bool:
            return self
        if self.dtype.is_float:
            return self * self.sign()  # so that the gradient is sign(x), 0 at 0 as in PyTorch
        return (self < 0).where(-self, self)

    def sign(self) -> Self:
        """-1, 0 or 1 by the sign of each element, in self's dtype (0 for NaN and -0.0, as PyTorch; bool as it is).

        Examples:
            >>> Tensor([-2.5, 0.0, 3.0]).sign().tolist()
            [-1.0, 0.0, 1.0]
        """
        return (self > 0).where(1, (self < 0).where(-1, 0)).cast(self.dtype) if not self.dtype.is_bool else self

    def square(self) -> Self:
        """`self * self`.

        Examples:
            >>> Tensor([-2, 3]).square().tolist()
            [4, 9]
        """
        return self * self

    def clip(self, min_: Scalar | None = None, max_: Scalar | None = None) -> Self:
        """Limit the values to [min_, max_] (either bound may be None, not both). At a bound the gradient passes
        through, as PyTorch's clamp (`hardtanh` gives 0 there instead). `clamp` is an alias.

        Examples:
            >>> Tensor([-2, 0, 5]).clip(-1, 3).tolist()
            [-1, 0, 3]
            >>> Tensor([-2.0, 0.5]).clamp(min_=0).tolist()
            [0.0, 0.5]
        """
        if min_ is None and max_ is None:  # most likely a mistake: tinygrad and PyTorch refuse it
            raise ArgumentError("clip needs at least one of min_ and max_")
        # where, not maximum/minimum: at a bound the gradient passes through (PyTorch's clamp) instead of splitting
        out = self
        if min_ is not None:
            out = (out < min_).where(min_, out)
        if max_ is not None:
            out = (out > max_).where(max_, out)
        return out
    clamp = clip
    """Alias of `clip` (PyTorch's name).

    Examples:
        >>> Tensor([-2, 0, 5]).clamp(0, 3).tolist()
        [0, 0, 3]
    """

    # activations. At a kink the gradient is PyTorch's: the x <= 0 side for the ReLU family, 0 at the
    # bounds of hardtanh/relu6/hardsigmoid
    def relu(self) -> Self:
        """max(x, 0); NaN stays NaN. The gradient at 0 is 0 (PyTorch's).

        Examples:
            >>> Tensor([-1.0, 0.0, 2.0]).relu().tolist()
            [0.0, 0.0, 2.0]
        """
        return (self <= 0).where(0, self)  # NaN stays NaN

    def sigmoid(self) -> Self:
        """The logistic function 1 / (1 + exp(-x)), computed without overflow, as a float.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 2.0, -100.0]).sigmoid().tolist()]
            [0.5, 0.8808, 0.0]
        """
        def f(x: Self) -> Self:
            neg = x < 0
            e = neg.where(x, -x).exp()  # exp(-|x|) never overflows
            p = 1 / (1 + e)
            return neg.where(e * p, p)
        return _in_float32(self._float(), f)

    def tanh(self) -> Self:
        """The hyperbolic tangent, as a float.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 1.0, -20.0]).tanh().tolist()]
            [0.0, 0.7616, -1.0]
        """
        def f(a: Self) -> Self:  # a >= 0: tanh(a) = -e / (2 + e), e = expm1(-2a) in (-1, 0]
            e = (-2 * a).expm1()
            return -e / (2 + e)
        return _in_float32(self, lambda x: _odd(x, f))

    def leaky_relu(self, neg_slope: float = 0.01) -> Self:
        """x for x > 0, else `neg_slope * x`.

        Examples:
            >>> Tensor([-2.0, 0.0, 3.0]).leaky_relu(0.5).tolist()
            [-1.0, 0.0, 3.0]
        """
        return (self > 0).where(self, self * neg_slope)

    def elu(self, alpha: float = 1.0) -> Self:
        """x for x > 0, else `alpha * (exp(x) - 1)`.

        Examples:
            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).elu().tolist()]
            [-0.6321, 0.0, 2.0]
        """
        def f(x: Self) -> Self:
            pos = x > 0
            return pos.where(x, alpha * pos.where(0.0, x).expm1())
        return _in_float32(self, f)

    def celu(self, alpha: float = 1.0) -> Self:
        """x for x > 0, else `alpha * (exp(x / alpha) - 1)` (alpha must be nonzero).

        Examples:
            >>> [round(v, 4) for v in Tensor([-2.0, 3.0]).celu(alpha=2.0).tolist()]
            [-1.2642, 3.0]
        """
        if alpha == 0:
            raise ValueError("celu with alpha=0 divides by zero; alpha must be nonzero")
        def f(x: Self) -> Self:
            pos = x > 0
            return pos.where(x, alpha * (pos.where(0.0, x) / alpha).expm1())
        return _in_float32(self, f)

    def selu(self, alpha: float = SELU_ALPHA, gamma: float = SELU_SCALE) -> Self:
        """`gamma * elu(x, alpha)` with the self-normalising constants (alpha ~1.6733, gamma ~1.0507) by default.

        Examples:
            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).selu().tolist()]
            [-1.1113, 0.0, 1.0507]
        """
        return self.elu(alpha) * gamma

    def gelu(self, approximate: str = "tanh") -> Self:
        """GELU. The default is tinygrad's tanh approximation (PyTorch's approximate='tanh'); pass
        approximate='none' for the exact x * Phi(x) that is PyTorch's default.

        Examples:
            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).gelu().tolist()]
            [-0.1588, 0.0, 0.8412]
            >>> [round(v, 4) for v in Tensor([1.0]).gelu(approximate="none").tolist()]
            [0.8413]
        """
        if approximate == "tanh":
            def f(x: Self) -> Self:
                return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
            return _in_float32(self, f)
        if approximate == "none":
            return _in_float32(self, lambda x: 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf()))
        raise ValueError(f"gelu approximate must be 'tanh' or 'none', got {approximate!r}")

    def quick_gelu(self) -> Self:
        """`x * sigmoid(1.702 x)`, a cheaper approximation of GELU (CLIP's).

        Examples:
            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).quick_gelu().tolist()]
            [-0.1542, 0.0, 0.8458]
        """
        return self * (self * 1.702).sigmoid()

    def silu(self) -> Self:
        """`x * sigmoid(x)` (SiLU, also called swish).

        Examples:
            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).silu().tolist()]
            [-0.2689, 0.0, 0.7311]
        """
        return self * self.sigmoid()

    def swish(self) -> Self:
        """`x * sigmoid(x)`: the same as `silu`.

        Examples:
            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).swish().tolist()]
            [-0.2689, 0.0, 0.7311]
        """
        return self.silu()

    def mish(self) -> Self:
        """`x * tanh(softplus(x))`.

        Examples:
            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).mish().tolist()]
            [-0.3034, 0.0, 0.8651]
        """
        return _in_float32(self, lambda x: x * x.softplus().tanh())

    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Self:
        """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (PyTorch's rule).

        Examples:
            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0, 30.0]).softplus().tolist()]
            [0.3133, 0.6931, 1.3133, 30.0]
        """
        if beta == 0:
            raise ValueError("softplus with beta=0 divides by zero; beta must be nonzero")
        def f(x: Self) -> Self:
            big = x * beta > threshold
            return big.where(x, big.where(0.0, x * beta).exp().log1p() * (1 / beta))
        return _in_float32(self, f)

    def softsign(self) -> Self:
        """`x / (1 + |x|)`.

        Examples:
            >>> Tensor([-3.0, 0.0, 1.0]).softsign().tolist()
            [-0.75, 0.0, 0.5]
        """
        return self / (1 + self.abs())

    def logsigmoid(self) -> Self:
        """log(sigmoid(x)), computed without overflow: min(x, 0) - log1p(exp(-|x|)).

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, -100.0, 100.0]).logsigmoid().tolist()]
            [-0.6931, -100.0, -0.0]
        """
        return _in_float32(self, lambda x: x.minimum(0) - (-x.abs()).exp().log1p())

    def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Self:
        """clip(alpha x + beta, 0, 1), PyTorch's hardsigmoid with the defaults; the gradient is 0 at the bounds.

        Examples:
            >>> Tensor([-4.0, 0.0, 1.5, 4.0]).hardsigmoid().tolist()
            [0.0, 0.5, 0.75, 1.0]
        """
        y = self * alpha + beta
        return (y <= 0).where(0.0, (y >= 1).where(1.0, y))

    def hardswish(self) -> Self:
        """x * relu6(x + 3) / 6; the gradient is 0 at -3 and 1 at 3, as PyTorch.

        Examples:
            >>> Tensor([-4.0, 0.0, 3.0, 5.0]).hardswish().tolist()
            [0.0, 0.0, 3.0, 5.0]
        """
        return (self <= -3).where(0.0, (self >= 3).where(self, self * (self + 3) * (1 / 6)))

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Self:
        """clip(x, min_val, max_val) with PyTorch's gradient: 0 at and beyond the bounds (clip passes it at them).

        Examples:
            >>> Tensor([-2.0, 0.5, 2.0]).hardtanh().tolist()
            [-1.0, 0.5, 1.0]
        """
        return (self <= min_val).where(min_val, (self >= max_val).where(max_val, self))

    def relu6(self) -> Self:
        """min(max(x, 0), 6): `hardtanh(0, 6)`.

        Examples:
            >>> Tensor([-1.0, 3.0, 8.0]).relu6().tolist()
            [0.0, 3.0, 6.0]
        """
        return self.hardtanh(0.0, 6.0)


def _wide(x: TensorT) -> bool:
    return x.dtype == dtypes.float64


def _in_float32(x: TensorT, fn: Callable[[TensorT], TensorT]) -> TensorT:
    """fn of x as a float, computed in float32 for 16-bit floats and rounded back once."""
    xf = x._float()
    if xf.dtype.itemsize == 2:
        return fn(xf.cast(dtypes.float32)).cast(xf.dtype)
    return fn(xf)


def _poly(x: TensorT, coeffs: Sequence[float]) -> TensorT:
    """coeffs[0] + coeffs[1] x + ... by Horner's rule."""
    acc = x * coeffs[-1] + coeffs[-2]
    for c in reversed(coeffs[:-2]):
        acc = acc * x + c
    return acc


def _odd(x: TensorT, f: Callable[[TensorT], TensorT]) -> TensorT:
    """An odd function from f on x >= 0. Reflecting with where (not abs/sign) keeps the slope at 0 nonzero."""
    neg = x < 0
    fx = f(neg.where(-x, x))
    return neg.where(-fx, fx)


def _atan_unit(a: TensorT) -> TensorT:
    """atan on [0, 1]: above tan(pi/8) shift by pi/4 (atan a = pi/4 + atan((a-1)/(a+1))), then a Taylor series
    on |z| <= tan(pi/8)."""
    hi = a > 0.41421356237309503
    z = hi.where((a - 1) / (a + 1), a)
    series = z * _poly(z * z, [(-1) ** k / (2 * k + 1) for k in range(21 if _wide(a) else 10)])
    return hi.where(math.pi / 4 + series, series)


def _atan2(y: TensorT, x: TensorT) -> TensorT:
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


def _erf_nonneg(a: TensorT) -> TensorT:
    small = a < 0.5
    s = small.where(a, 0.0)
    series = s * _poly(s * s, _ERF_TAYLOR if _wide(a) else _ERF_TAYLOR[:8])
    b = (a > 6).where(6.0, small.where(0.5, a))  # NaN passes through; beyond 6 erf is 1 in float64
    lo, hi = _ERFC_T
    u = (2 / (1 + b * 0.25) - (hi + lo)) * (1 / (hi - lo))
    # Clenshaw's recurrence for the Chebyshev sum
    b1: TensorT | float = _ERFC_CHEB[-1]
    b2: TensorT | float = 0.0
    for c in reversed(_ERFC_CHEB[1:-1]):
        b1, b2 = 2 * u * b1 - b2 + c, b1
    cheb = u * b1 - b2 + _ERFC_CHEB[0]
    return small.where(series, 1 - (cheb - b * b).exp())
