"""tinygrad programs, written the way tinygrad's README and examples write them, each with its own numpy check.

Every program imports only tinygrad's public names and numpy, so the same file runs under tinygrad itself:
`python tinygrad_programs.py` runs them all and prints one line per program, `ok` or what went wrong
(test_tinygrad_programs.py runs them here, and under tinygrad 0.14.0 where a venv of it exists). A program
returns pairs of (what tinygrad computed, what numpy says it should be); the caller compares them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
from tinygrad import Context, GlobalCounters, Tensor, TinyJit, Variable, dtypes, nn

Pairs = list[tuple[np.ndarray, np.ndarray]]
PROGRAMS: dict[str, Callable[[], Pairs]] = {}


def program(fn: Callable[[], Pairs]) -> Callable[[], Pairs]:
    PROGRAMS[fn.__name__] = fn
    return fn


# ---- tinygrad's README network: plain tensors handed to Adam, backward() on any float graph ----

class LinearNet:
    def __init__(self):
        self.l1 = Tensor.kaiming_uniform(784, 128)
        self.l2 = Tensor.kaiming_uniform(128, 10)

    def __call__(self, x: Tensor) -> Tensor:
        return x.flatten(1).dot(self.l1).relu().dot(self.l2)


def _numpy_adam_steps(x: np.ndarray, y: np.ndarray, l1: np.ndarray, l2: np.ndarray, steps: int,
                      lr: float = 0.001, b1: float = 0.9, b2: float = 0.999,
                      eps: float = 1e-8) -> tuple[list[float], list[np.ndarray]]:
    x = x.reshape(len(x), -1).astype(np.float64)
    params = [l1.astype(np.float64), l2.astype(np.float64)]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    losses = []
    for t in range(1, steps + 1):
        h = x @ params[0]
        r = np.maximum(h, 0)
        o = r @ params[1]
        o_max = o.max(axis=1, keepdims=True)
        logp = o - o_max - np.log(np.exp(o - o_max).sum(axis=1, keepdims=True))
        losses.append(float(-logp[np.arange(len(y)), y].mean()))
        d_o = np.exp(logp)
        d_o[np.arange(len(y)), y] -= 1
        d_o /= len(y)
        grads = [x.T @ ((d_o @ params[1].T) * (h > 0)), r.T @ d_o]
        for i, g in enumerate(grads):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            params[i] -= lr * (m[i] / (1 - b1**t)) / (np.sqrt(v[i] / (1 - b2**t)) + eps)
    return losses, params


@program
def readme_network() -> Pairs:
    Tensor.manual_seed(0)
    model = LinearNet()
    optim = nn.optim.Adam([model.l1, model.l2], lr=0.001)
    x, y = Tensor.rand(4, 1, 28, 28), Tensor([2, 4, 3, 7])
    start = (x.numpy(), y.numpy(), model.l1.numpy(), model.l2.numpy())
    losses = []
    with Context(TRAINING=1):
        for _ in range(10):
            optim.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            optim.step()
            losses.append(loss.item())
    expected, params = _numpy_adam_steps(*start, steps=10)
    # the first loss, and the weights after ten steps: tinygrad 0.14.0 reads a loss that is still lazy after
    # optim.step() from the updated weights (it prints the next step's loss), this project the loss's own step
    return [(np.array(losses[0]), np.array(expected[0])), (model.l1.numpy(), params[0]), (model.l2.numpy(), params[1])]


@program
def backward_fills_every_float_tensor() -> Pairs:
    # no requires_grad anywhere: tinygrad's backward() fills .grad of the float tensors the loss depends on
    w = Tensor([[1.0, -2.0], [3.0, 0.5]])
    x = Tensor([[0.5, 1.5]])
    (x @ w).relu().sum().backward()
    assert w.grad is not None and x.grad is not None, "backward() left .grad empty"
    wn, xn = w.numpy(), x.numpy()
    active = (xn @ wn > 0).astype(np.float32)
    return [(w.grad.numpy(), xn.T @ active), (x.grad.numpy(), active @ wn.T)]


# ---- the MNIST training step that samples its batch inside the jit ----

@program
def mnist_step_samples_inside_jit() -> Pairs:
    Tensor.manual_seed(1)
    rows = np.random.default_rng(1).random((600, 1, 28, 28), dtype=np.float32)
    labels = np.random.default_rng(2).integers(0, 10, 600).astype(np.int32)
    X_train, Y_train = Tensor(rows), Tensor(labels)
    model = LinearNet()
    opt = nn.optim.SGD([model.l1, model.l2], lr=0.01)

    @TinyJit
    @Context(TRAINING=1)
    def train_step() -> tuple[Tensor, Tensor, Tensor, Tensor]:
        opt.zero_grad()
        samples = Tensor.randint(32, high=X_train.shape[0])
        X, Y = X_train[samples], Y_train[samples]
        loss = model(X).sparse_categorical_crossentropy(Y).backward()
        opt.step()
        return loss.realize(), samples.realize(), X.realize(), Y.realize()

    pairs: Pairs = []
    seen = []
    for _ in range(4):  # a run, the capture, two replays
        _, samples, X, Y = train_step()
        idx = samples.numpy()
        seen.append(tuple(idx))
        pairs += [(X.numpy(), rows[idx]), (Y.numpy(), labels[idx])]
    assert len(set(seen)) == len(seen), "every step must sample a new batch"
    return pairs


# ---- a KV-cache decode loop with a symbolic position, under TinyJit ----

@program
def kv_cache_decode_symbolic_position() -> Pairs:
    B, H, D, MAX = 1, 2, 8, 16
    rng = np.random.default_rng(3)
    cache_kv = Tensor.zeros(2, B, MAX, H, D).contiguous().realize()

    @TinyJit
    def step(xq: Tensor, xk: Tensor, xv: Tensor, start_pos: Variable) -> Tensor:
        cache_kv[:, :, start_pos:start_pos + 1, :, :].assign(Tensor.stack(xk, xv)).realize()
        keys = cache_kv[0, :, 0:start_pos + 1, :, :]
        values = cache_kv[1, :, 0:start_pos + 1, :, :]
        q, k, v = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
        return q.scaled_dot_product_attention(k, v).transpose(1, 2).realize()

    ks, vs, pairs = [], [], []
    for pos in range(1, 8):
        q, k, v = (rng.standard_normal((B, 1, H, D)).astype(np.float32) for _ in range(3))
        ks.append(k)
        vs.append(v)
        start_pos = Variable("start_pos", 1, MAX - 1).bind(pos)
        out = step(Tensor(q), Tensor(k), Tensor(v), start_pos).numpy()
        # positions 1..pos hold this loop's keys; position 0 is the cache's initial zeros
        keys = np.concatenate([np.zeros((B, 1, H, D), np.float32), *ks], axis=1)
        values = np.concatenate([np.zeros((B, 1, H, D), np.float32), *vs], axis=1)
        scores = np.einsum("bqhd,bkhd->bhqk", q, keys) / np.sqrt(D)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        pairs.append((out, np.einsum("bhqk,bkhd->bqhd", weights, values)))
    return pairs


# ---- in-place writes through slices ----

@program
def slice_assigns() -> Pairs:
    c = Tensor.zeros(2, 3).contiguous().realize()
    c[:, 1:2].assign(Tensor.ones(2, 1)).realize()
    expected = np.zeros((2, 3), np.float32)
    expected[:, 1:2] = 1
    pairs = [(c.numpy(), expected.copy())]
    c[1].assign(Tensor([5.0, 6.0, 7.0])).realize()
    expected[1] = [5, 6, 7]
    pairs.append((c.numpy(), expected.copy()))
    c.T[2:].assign(Tensor([[8.0, 9.0]])).realize()
    expected.T[2:] = [[8, 9]]
    pairs.append((c.numpy(), expected.copy()))
    c[0, :2] = Tensor([-1.0, -2.0])
    expected[0, :2] = [-1, -2]
    pairs.append((c.numpy(), expected.copy()))
    return pairs


# ---- counters, and the 8-bit floats ----

@program
def global_counters_after_a_matmul() -> Pairs:
    a, b = Tensor.rand(64, 32).realize(), Tensor.rand(32, 16).realize()
    GlobalCounters.reset()
    (a @ b).realize()
    flops = 2 * 64 * 32 * 16  # a multiply and an add per term (tinygrad 0.14.0 skips each dot product's first add)
    return [(np.array([GlobalCounters.kernel_count, round(GlobalCounters.global_ops / flops, 1)]), np.array([1, 1.0]))]


@program
def fp8_round_trips() -> Pairs:
    # values against the OCP 8-bit float tables: E4M3 has 3 mantissa bits, no infinity, largest 448, smallest
    # subnormal 2**-9; E5M2 has 2 mantissa bits, largest 57344, smallest subnormal 2**-16. Ties round to even;
    # finite values past the largest saturate.
    values = [0.0, 1.0, -1.5, 17.0, 19.0, 0.3, 448.0, 500.0, 2.0**-9, 2.0**-11, -1000.0]
    e4m3 = [0.0, 1.0, -1.5, 16.0, 20.0, 0.3125, 448.0, 448.0, 2.0**-9, 0.0, -448.0]
    e5m2 = [0.0, 1.0, -1.5, 16.0, 20.0, 0.3125, 448.0, 512.0, 2.0**-9, 2.0**-11, -1024.0]
    # realized in between: tinygrad 0.14.0 drops the rounding of a cast to fp8 fused with the cast back
    got4 = Tensor(values).cast(dtypes.fp8e4m3).realize().cast(dtypes.float32).numpy()
    got5 = Tensor(values).cast(dtypes.fp8e5m2).realize().cast(dtypes.float32).numpy()
    return [(got4, np.array(e4m3, np.float32)), (got5, np.array(e5m2, np.float32))]


def check(pairs: Pairs) -> None:
    for got, expected in pairs:
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(expected, np.float64), rtol=1e-4,
                                   atol=1e-4)


if __name__ == "__main__":
    failed = 0
    for name, fn in PROGRAMS.items():
        try:
            check(fn())
            print(f"{name}: ok")
        except Exception as e:  # report every program, whatever breaks
            failed += 1
            print(f"{name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    sys.exit(1 if failed else 0)
