"""The CPU workloads of `bench/run.py`, written once per framework the way its users would write them.

Runs inside a worker process (see worker.py). tinygrad 0.14.0 and this project share one
implementation, since they share the Tensor API: only the interpreter they run in differs.
Every workload checks its result against numpy once during setup, so a fast wrong answer
shows up as an error instead of a number.
"""

from __future__ import annotations

import importlib.metadata
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from worker_api import NotAvailable, Result, calibrate, per_call

SEED = 0
DISPATCH_SIZE = 16  # elements of the tiny tensor in the dispatch and JIT workloads


def _inputs(n: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(SEED)
    return [rng.standard_normal(n, dtype=np.float32) for _ in range(count)]


def _check(got: Any, want: np.ndarray, what: str, tol: float = 1e-3) -> None:
    got = np.asarray(got)
    if not np.allclose(got, want, rtol=tol, atol=tol):
        raise AssertionError(f"{what}: wrong result (max abs error {np.max(np.abs(got - want)):.3g})")


class Numpy:
    def matmul(self, n: int, inner: int) -> Callable[[], Result]:
        a, b = (x.reshape(n, n) for x in _inputs(n * n, 2))
        return lambda: per_call(lambda: a @ b, inner)

    def elementwise(self, n: int) -> Callable[[], Result]:
        # numpy cannot fuse: the best it can do without temporaries is two passes into a preallocated output
        a, b, c = _inputs(n, 3)
        out = np.empty_like(a)

        def step() -> None:
            np.multiply(a, b, out=out)
            np.add(out, c, out=out)
        step()
        _check(out, a * b + c, "a*b+c")
        return lambda: per_call(step, 1)

    def reduce(self, n: int, op: str) -> Callable[[], Result]:
        a = _inputs(n, 1)[0]
        return lambda: per_call(lambda: getattr(a, op)(), 1)

    def copy(self, n: int) -> Callable[[], Result]:
        src, dst = _inputs(n, 1)[0], np.empty(n, np.float32)
        return lambda: per_call(lambda: np.copyto(dst, src), 1)

    def dispatch(self, seconds: float) -> Callable[[], Result]:
        x = np.ones(DISPATCH_SIZE, np.float32)

        def step() -> None:
            nonlocal x
            x = x + 1
        calls = calibrate(step, seconds)
        return lambda: per_call(step, calls)

    def jit(self, kernels: int, calls: int = 1) -> Callable[[], Result]:
        raise NotAvailable("numpy has no JIT; see the eager dispatch table")

    def jit_call(self, layers: int, calls: int, fresh_inputs: bool) -> Callable[[], Result]:
        raise NotAvailable("numpy has no JIT or modules")

    def firstcall(self, n: int) -> Callable[[], Result]:
        a, b = (x.reshape(n, n) for x in _inputs(n * n, 2))
        return lambda: per_call(lambda: a @ b, 1)


class Torch:
    def __init__(self) -> None:
        import torch
        self.torch = torch

    def _tensors(self, n: int, count: int) -> list[Any]:
        return [self.torch.from_numpy(x) for x in _inputs(n, count)]

    def matmul(self, n: int, inner: int) -> Callable[[], Result]:
        a, b = (x.reshape(n, n) for x in self._tensors(n * n, 2))
        return lambda: per_call(lambda: a @ b, inner)

    def elementwise(self, n: int) -> Callable[[], Result]:
        a, b, c = self._tensors(n, 3)
        out = self.torch.empty_like(a)

        def step() -> None:
            self.torch.mul(a, b, out=out)
            out.add_(c)
        step()
        _check(out.numpy(), (a * b + c).numpy(), "a*b+c")
        return lambda: per_call(step, 1)

    def reduce(self, n: int, op: str) -> Callable[[], Result]:
        a = self._tensors(n, 1)[0]
        return lambda: per_call(lambda: getattr(a, op)(), 1)

    def copy(self, n: int) -> Callable[[], Result]:
        src, dst = self._tensors(n, 1)[0], self.torch.empty(n)
        return lambda: per_call(lambda: dst.copy_(src), 1)

    def dispatch(self, seconds: float) -> Callable[[], Result]:
        x = self.torch.ones(DISPATCH_SIZE)

        def step() -> None:
            nonlocal x
            x = x + 1
        calls = calibrate(step, seconds)
        return lambda: per_call(step, calls)

    def jit(self, kernels: int, calls: int = 1) -> Callable[[], Result]:
        # plain eager: the same chain of separate ops, no torch.compile (its graph capture is not a replay
        # of separately launched kernels, and its compile would dominate a run this short)
        def chain() -> None:
            x = self.torch.ones(DISPATCH_SIZE)
            for _ in range(kernels):
                x = x + 1
        chain()

        def chains() -> None:
            for _ in range(calls):
                chain()

        def measure() -> Result:
            return {"seconds": per_call(chains, 1)["seconds"] / (kernels * calls)}
        return measure

    def jit_call(self, layers: int, calls: int, fresh_inputs: bool) -> Callable[[], Result]:
        # the module called in plain eager: what the Python of one call costs without a capture to replay
        torch = self.torch
        model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(layers)])
        xs = [torch.full((1, 4), float(i)) for i in range(calls)]

        def run() -> None:
            with torch.no_grad():
                for x in xs:
                    model(x) * 2
        run()
        return lambda: {"seconds": per_call(run, 1)["seconds"] / calls}

    def firstcall(self, n: int) -> Callable[[], Result]:
        a, b = (x.reshape(n, n) for x in self._tensors(n * n, 2))
        return lambda: per_call(lambda: a @ b, 1)


class TinygradApi:
    """tinygrad 0.14.0 and this project: the same code, each in its own venv."""

    def __init__(self) -> None:
        import tinygrad
        self.tg = tinygrad
        self.Tensor = tinygrad.Tensor
        self.device = tinygrad.Device[tinygrad.Device.DEFAULT]

    def sync(self) -> None:
        self.device.synchronize()

    def _fresh(self, arrays: list[np.ndarray]) -> list[Any]:
        # Fresh buffers for every measurement: a graph whose inputs were realized before can be answered
        # from a cache of realized results, which would time a lookup instead of a kernel.
        tensors = [self.Tensor(x).realize() for x in arrays]
        self.sync()
        return tensors

    def matmul(self, n: int, inner: int) -> Callable[[], Result]:
        a, b = (x.reshape(n, n) for x in _inputs(n * n, 2))
        first_a, first_b = self._fresh([a, b])
        _check((first_a @ first_b).numpy(), a @ b, f"matmul {n}", tol=1e-2)

        def measure() -> Result:
            pairs = [self._fresh([a, b]) for _ in range(inner)]
            start = time.perf_counter()
            for x, y in pairs:
                (x @ y).realize()
            self.sync()
            return {"seconds": (time.perf_counter() - start) / inner}
        return measure

    def elementwise(self, n: int) -> Callable[[], Result]:
        arrays = _inputs(n, 3)
        a, b, c = self._fresh(arrays)
        _check((a * b + c).numpy(), arrays[0] * arrays[1] + arrays[2], "a*b+c")

        def measure() -> Result:
            a, b, c = self._fresh(arrays)
            start = time.perf_counter()
            (a * b + c).realize()
            self.sync()
            return {"seconds": time.perf_counter() - start}
        return measure

    def reduce(self, n: int, op: str) -> Callable[[], Result]:
        """max or argmax of n float32, the whole tensor: one output (a greedy sampler's argmax over a vocabulary)."""
        arrays = _inputs(n, 1)
        _check(getattr(self._fresh(arrays)[0], op)().numpy(), getattr(arrays[0], op)(), op)

        def measure() -> Result:
            a = self._fresh(arrays)[0]
            start = time.perf_counter()
            getattr(a, op)().realize()
            self.sync()
            return {"seconds": time.perf_counter() - start}
        return measure

    def copy(self, n: int) -> Callable[[], Result]:
        raise NotAvailable("no plain copy op; compare with the numpy copy row")

    def dispatch(self, seconds: float) -> Callable[[], Result]:
        x = self.Tensor(np.ones(DISPATCH_SIZE, np.float32)).realize()

        def step() -> None:
            nonlocal x
            x = (x + 1).realize()
        calls = calibrate(step, seconds)
        return lambda: per_call(step, calls, self.sync)

    def jit(self, kernels: int, calls: int = 1) -> Callable[[], Result]:
        """`calls` replays in a row, each on a fresh input made before the clock starts."""
        tiny_jit = getattr(self.tg, "TinyJit", None)
        if tiny_jit is None:
            raise NotAvailable("TinyJit missing")

        def chain(x: Any) -> Any:
            for _ in range(kernels):
                x = (x + 1).realize()
            return x
        replay = tiny_jit(chain)
        start = np.arange(DISPATCH_SIZE, dtype=np.float32)
        for call in range(4):  # capture happens on an early call; replays after that must still be right
            _check(replay(self._fresh([start + call])[0]).numpy(), start + call + kernels, f"TinyJit call {call}")

        def measure() -> Result:
            xs = self._fresh([start] * calls)
            began = time.perf_counter()
            for x in xs:
                replay(x)
            self.sync()
            return {"seconds": (time.perf_counter() - began) / (kernels * calls)}
        return measure

    def jit_call(self, layers: int, calls: int, fresh_inputs: bool) -> Callable[[], Result]:
        """The Python of one replay of a `@TinyJit` method whose object holds 2 * `layers` tensors, given an input
        tensor (a new one each call, or else the same one: nothing to rebuild) and an int (tinygrad's examples jit
        methods so). The int stays the same: tinygrad 0.14.0 replays the value of its capture whatever is passed."""
        from tinygrad import nn
        tiny_jit = getattr(self.tg, "TinyJit", None)
        if tiny_jit is None:
            raise NotAvailable("TinyJit missing")
        def forward(model: Any, x: Any, scale: int) -> Any:
            for layer in model.layers:
                x = layer(x)
            return (x * scale).realize()

        class Model:
            def __init__(self) -> None:
                self.layers = [nn.Linear(4, 4) for _ in range(layers)]

            __call__ = tiny_jit(forward)

        model = Model()
        xs = self._fresh([np.full((1, 4), i, np.float32) for i in range(calls)])
        for i in range(6):  # captures happen on early calls; replays after that must still be right
            x = xs[i % len(xs)]
            _check(model(x, 2).numpy(), forward(model, x, 2).numpy(), f"TinyJit method call {i}")

        inputs = xs if fresh_inputs else [xs[0]] * len(xs)

        def run() -> None:
            for x in inputs:
                model(x, 2)
            self.sync()
        return lambda: {"seconds": per_call(run, 1)["seconds"] / calls}

    def mnist_sample(self, sampling: str, rows: int, batch: int, steps: int) -> Callable[[], Result]:
        """beautiful_mnist's TinyJit training step on a dataset of `rows` 28x28 images, its batch drawn either the
        way tinygrad's example does (`samples = Tensor.randint(...)` inside the step, `X_train[samples]`: the
        dataset stays on the device) or on the host (numpy draws and slices the batch, which is copied in).
        Timed: `steps` steps, each to the loss read back; for the host batch, drawing and copying it too."""
        from tinygrad import nn
        from tinygrad.nn.optim import Adam
        from tinygrad.nn.state import get_parameters
        tiny_jit = getattr(self.tg, "TinyJit", None)
        if tiny_jit is None:
            raise NotAvailable("TinyJit missing")
        rng = np.random.default_rng(SEED)
        x_np = rng.integers(0, 256, (rows, 1, 28, 28)).astype(np.float32)
        y_np = rng.integers(0, 10, rows).astype(np.int32)
        Tensor = self.Tensor
        x_train, y_train = Tensor(x_np).realize(), Tensor(y_np).realize()
        Tensor.manual_seed(SEED)
        layers: list[Callable[[Any], Any]] = [
            nn.Conv2d(1, 32, 5), Tensor.relu, nn.Conv2d(32, 32, 5), Tensor.relu, nn.BatchNorm(32), Tensor.max_pool2d,
            nn.Conv2d(32, 64, 3), Tensor.relu, nn.Conv2d(64, 64, 3), Tensor.relu, nn.BatchNorm(64), Tensor.max_pool2d,
            lambda x: x.flatten(1), nn.Linear(576, 10)]
        opt = Adam(get_parameters(layers), lr=1e-3)

        def train(x: Any, y: Any) -> Any:
            opt.zero_grad()
            loss = x.sequential(layers).sparse_categorical_crossentropy(y).backward()
            return loss.realize(*opt.schedule_step())

        def device_batch() -> Any:
            samples = Tensor.randint(batch, high=rows)
            return train(x_train[samples], y_train[samples])

        if sampling == "device":
            jitted = tiny_jit(device_batch)

            def step() -> float:
                return float(jitted().item())
            # the gather the step relies on, checked outside the JIT (inside it the samples are not visible)
            picks = rng.integers(0, rows, batch).astype(np.int32)
            _check(x_train[Tensor(picks)].numpy(), x_np[picks], "X_train[samples]", tol=0)
        elif sampling == "host":
            jitted = tiny_jit(train)

            def step() -> float:
                picks = rng.integers(0, rows, batch)
                return float(jitted(Tensor(x_np[picks]).realize(), Tensor(y_np[picks]).realize()).item())
        else:
            raise ValueError(f"sampling is 'device' or 'host', not {sampling!r}")
        # this project checks class indices on the host by default; a TinyJit capture cannot read the host
        knobs = {"TRAINING": 1, **({"CHECK_INDICES": 0} if self._ours() else {})}
        with self.tg.Context(**knobs):
            for _ in range(3):  # TinyJit captures on the second call
                loss = step()
        if not np.isfinite(loss):
            raise AssertionError(f"mnist step ({sampling} batch): the loss is {loss}")

        def measure() -> Result:
            with self.tg.Context(**knobs):
                start = time.perf_counter()
                for _ in range(steps):
                    step()
                return {"seconds": (time.perf_counter() - start) / steps}
        return measure

    def _ours(self) -> bool:
        try:
            importlib.metadata.version("tg-core")
        except importlib.metadata.PackageNotFoundError:
            return False
        return True

    def firstcall(self, n: int) -> Callable[[], Result]:
        a, b = self._fresh([x.reshape(n, n) for x in _inputs(n * n, 2)])

        def measure() -> Result:
            start = time.perf_counter()
            (a @ b).realize()
            self.sync()
            return {"seconds": time.perf_counter() - start}
        return measure


def make(framework: str, workload: str, params: dict[str, Any]) -> Callable[[], Result]:
    implementation = {"numpy": Numpy, "torch": Torch, "tinygrad": TinygradApi, "ours": TinygradApi}[framework]()
    method = getattr(implementation, workload, None)
    if method is None:
        raise NotAvailable(f"{workload} is not written for {framework}")
    result: Callable[[], Result] = method(**params)
    return result


def info(framework: str) -> dict[str, Any]:
    found: dict[str, Any] = {"numpy": np.__version__}
    if framework == "torch":
        import torch
        found.update(torch=torch.__version__, threads=torch.get_num_threads())
    elif framework in ("tinygrad", "ours"):
        import tinygrad
        dist = "tinygrad" if framework == "tinygrad" else "tg-core"
        found.update({dist: importlib.metadata.version(dist), "device": tinygrad.Device.DEFAULT,
                      "TinyJit": "yes" if hasattr(tinygrad, "TinyJit") else "missing"})
        if framework == "ours" and tinygrad.Device.DEFAULT == "CPU":
            try:
                from tg_backend_cpu.thread_count import thread_count
                found["threads"] = thread_count()
            except ImportError:  # a CPU backend without a thread pool runs kernels on one thread
                found["threads"] = 1
            try:  # which path compiles the kernels: the figures differ between them
                from tg_backend_cpu import compiler as cc
                found["compiler"] = "llvm (llvmlite)" if cc.uses_llvm() else \
                    os.path.basename(cc.find_c_compiler()[0] or "none")
            except (ImportError, AttributeError):
                pass
    return found
