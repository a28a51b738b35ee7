"""Run a fixed set of tensor ops on `Device.DEFAULT` and save the results (and numpy's) to an .npz file.

    DEV=PYREF python integration-tests/scripts/tensor_ops.py out.npz

test_plugins.py runs it in a clean venv once with DEV=PYREF and once with DEV=CPU, and compares the
files: each tinygrad result `tg/NAME` against `np/NAME` (numpy, computed here from the same inputs)
and against the other device's `tg/NAME`. Results named `tg/exact/...` have no numpy twin (integer
division and shifts follow tinygrad's own rules) and are compared between devices only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import numpy as np
from tinygrad import Device, Tensor, dtypes


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest-even bfloat16, as float32 (numpy has no bfloat16)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def main(out_path: str) -> None:
    device = Device.DEFAULT
    expected = os.environ.get("DEV")
    assert expected is None or device == expected.upper(), f"DEV={expected} but Device.DEFAULT is {device}"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    y = rng.standard_normal((4, 6)).astype(np.float32)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    ints = rng.integers(-1000, 1000, size=(4, 6)).astype(np.int32)
    ints2 = rng.integers(-9, 9, size=(4, 6)).astype(np.int32)
    results: dict[str, np.ndarray] = {}

    def check(name: str, tg: Callable[..., Tensor], ref: Callable[..., np.ndarray] | None, *args: np.ndarray) -> None:
        out = tg(*[Tensor(a) for a in args])
        assert out.device == device, f"{name} ran on {out.device}, not {device}"
        if ref is None:
            results[f"tg/exact/{name}"] = out.numpy()
        else:
            results[f"tg/{name}"] = out.numpy()
            results[f"np/{name}"] = np.asarray(ref(*args))

    # elementwise and broadcasting
    check("add", lambda a, b: a + b, lambda a, b: a + b, x, y)
    check("sub_mul_div", lambda a, b: (a - b) * a / (b.abs() + 1), lambda a, b: (a - b) * a / (np.abs(b) + 1), x, y)
    check("broadcast", lambda a, b: a + b[0:1, :] * 2, lambda a, b: a + b[0:1, :] * 2, x, y)
    check("unary", lambda a: a.exp() + a.abs().sqrt() + (a.abs() + 1).log() + a.sin(),
          lambda a: np.exp(a) + np.sqrt(np.abs(a)) + np.log(np.abs(a) + 1) + np.sin(a), x)
    check("compare_where", lambda a, b: (a < b).where(a, b * 3), lambda a, b: np.where(a < b, a, b * 3), x, y)
    check("maximum", lambda a, b: a.maximum(b), np.maximum, x, y)
    # reductions and matmul
    check("matmul", lambda a, b: a @ b, lambda a, b: a @ b, x, w)
    check("sum_all", lambda a: a.sum(), lambda a: a.sum(), x)
    check("sum_axis", lambda a: a.sum(axis=1), lambda a: a.sum(axis=1), x)
    check("max_axis0", lambda a: a.max(axis=0), lambda a: a.max(axis=0), x)
    check("min_all", lambda a: a.min(), lambda a: a.min(), x)
    check("mean_keepdim", lambda a: a.mean(axis=1, keepdim=True), lambda a: a.mean(axis=1, keepdims=True), x)
    # views: reshape, permute, pad, flip, shrink, expand, and chains of them feeding compute
    check("reshape", lambda a: a.reshape(3, 8) * 2, lambda a: a.reshape(3, 8) * 2, x)
    check("permute", lambda a: a.permute(1, 0) + 1, lambda a: a.T + 1, x)
    check("pad", lambda a: a.pad(((1, 2), (0, 3))), lambda a: np.pad(a, ((1, 2), (0, 3))), x)
    check("flip", lambda a: a.flip(0, 1), lambda a: a[::-1, ::-1], x)
    check("shrink", lambda a: a[1:3, 2:5], lambda a: a[1:3, 2:5], x)
    check("expand", lambda a: a[0:1, :].expand(3, 6) * a[1:4, :], lambda a: a[0:1, :] * a[1:4, :], x)
    check("view_chain",
          lambda a, b: a.permute(1, 0).pad(((1, 0), (2, 1))).flip(0)[1:6] @ b.permute(1, 0).pad(((0, 1), None)),
          lambda a, b: np.pad(a.T, ((1, 0), (2, 1)))[::-1][1:6] @ np.pad(b.T, ((0, 1), (0, 0))), x, y)
    # dtypes and casts
    check("cast_int", lambda a: (a * 100).cast(dtypes.int32), lambda a: (a * 100).astype(np.int32), x)
    check("cast_uint8", lambda a: (a.abs() * 50).cast(dtypes.uint8), lambda a: (np.abs(a) * 50).astype(np.uint8), x)
    check("cast_float", lambda i: i.cast(dtypes.float32) / 7, lambda i: i.astype(np.float32) / 7, ints)
    check("cast_bool", lambda i: i.cast(dtypes.bool), lambda i: i.astype(np.bool_), ints2)
    check("half", lambda a: (a.cast(dtypes.float16) * 3).cast(dtypes.float32),
          lambda a: (a.astype(np.float16) * np.float16(3)).astype(np.float32), x)
    check("bfloat16", lambda a: a.cast(dtypes.bfloat16).cast(dtypes.float32), bf16_round, x)
    check("float64", lambda a: a.cast(dtypes.float64).exp().sum(axis=0),
          lambda a: np.exp(a.astype(np.float64)).sum(axis=0), x)
    check("int_arith", lambda i, j: i * j + i - 3, lambda i, j: i * j + i - 3, ints, ints2)
    check("int_wrap", lambda i: i * 3_000_000, lambda i: (i.astype(np.int64) * 3_000_000).astype(np.int32), ints)
    check("int_sum", lambda i: i.sum(axis=0), lambda i: i.sum(axis=0, dtype=np.int32), ints)  # tinygrad: int32
    check("int_floordiv", lambda i, j: i // j, None, ints, ints2)
    check("int_mod", lambda i, j: i % j, None, ints, ints2)
    # gradients, against derivatives written out in numpy
    pad_weights = rng.standard_normal((5, 8)).astype(np.float32)
    relu_mask = ((x @ w) > 0).astype(np.float32)
    sig = 1 / (1 + np.exp(-x))
    col_max = np.zeros_like(x)
    col_max[x.argmax(axis=0), np.arange(x.shape[1])] = 1
    grad_cases: list[tuple[str, tuple[np.ndarray, ...], Callable[..., Tensor], tuple[np.ndarray, ...]]] = [
        ("grad_matmul_relu", (x, w), lambda a, b: (a @ b).relu().sum(), (relu_mask @ w.T, x.T @ relu_mask)),
        ("grad_exp_mul", (x, y), lambda a, b: (a.exp() * b).sum(), (np.exp(x) * y, np.exp(x))),
        ("grad_sigmoid_mean", (x,), lambda a: a.sigmoid().mean(), (sig * (1 - sig) / x.size,)),
        ("grad_div", (x, y), lambda a, b: (a / (b * b + 1)).sum(),
         (1 / (y * y + 1), -x * 2 * y / (y * y + 1) ** 2)),
        # the max runs over a permuted, flipped view; the second term's gradient comes back through a pad
        ("grad_views", (x, y),
         lambda a, b: a.permute(1, 0).flip(0).max(axis=1).sum() + (b.pad(((1, 0), (0, 2))) * Tensor(pad_weights)).sum(),
         (col_max, pad_weights[1:, :6])),
    ]
    for name, inputs, f, want in grad_cases:
        params = [Tensor(v, requires_grad=True) for v in inputs]
        f(*params).backward()
        for k, (p, g) in enumerate(zip(params, want, strict=True)):
            assert p.grad is not None, f"{name}: no gradient for input {k}"
            results[f"tg/{name}/{k}"], results[f"np/{name}/{k}"] = p.grad.numpy(), np.asarray(g, np.float32)
    np.savez(out_path, **results)  # type: ignore[arg-type]
    print(f"{len([k for k in results if k.startswith('tg/')])} results on {device}")


if __name__ == "__main__":
    main(sys.argv[1])
