"""Training the beautiful_mnist model on Fashion-MNIST, per framework, inside a worker process.

The model: Conv2d 1->32 5x5, relu, Conv2d 32->32 5x5, relu, BatchNorm, max-pool, Conv2d 32->64 3x3,
relu, Conv2d 64->64 3x3, relu, BatchNorm, max-pool, flatten, Linear 576->10; Adam, cross-entropy.
Each measurement trains the next `chunk` steps and then measures test accuracy, so the parent can
interleave frameworks chunk by chunk and follow accuracy over time. Evaluation is not training time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import fashion_mnist
import numpy as np
from cpu_workloads import info as cpu_info
from worker_api import NotAvailable

TrainChunk = Callable[[], dict[str, Any]]
EVAL_BATCH = 1000


class Trainer:
    """Shared bookkeeping: the data, the step counter and the chunk loop; subclasses do the framework part."""

    def __init__(self, batch: int, lr: float, chunk: int, test_limit: int, seed: int):
        self.data = fashion_mnist.load()
        self.batch, self.lr, self.chunk, self.seed = batch, lr, chunk, seed
        self.test_x, self.test_y = self.data["test_x"][:test_limit], self.data["test_y"][:test_limit]
        self.step = 0

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        idx = fashion_mnist.batch_indices(self.step, self.batch, len(self.data["train_y"]), self.seed)
        return self.data["train_x"][idx], self.data["train_y"][idx]

    def train_step(self, x: np.ndarray, y: np.ndarray) -> float:
        raise NotImplementedError

    def predict(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def accuracy(self) -> float:
        hits = 0
        for start in range(0, len(self.test_y), EVAL_BATCH):
            predicted = self.predict(self.test_x[start:start + EVAL_BATCH])
            hits += int((predicted == self.test_y[start:start + EVAL_BATCH]).sum())
        return hits / len(self.test_y)

    def __call__(self) -> dict[str, Any]:
        times, loss = [], float("nan")
        for _ in range(self.chunk):
            x, y = self.next_batch()
            start = time.perf_counter()
            loss = self.train_step(x, y)  # returns a Python float, so the step has finished
            times.append(time.perf_counter() - start)
            self.step += 1
        start = time.perf_counter()
        accuracy = self.accuracy()
        return {"step_times": times, "steps": self.step, "loss": loss, "accuracy": accuracy,
                "eval_seconds": time.perf_counter() - start}


class TorchTrainer(Trainer):
    def __init__(self, **params: Any):
        super().__init__(**params)
        import torch
        from torch import nn
        self.torch = torch
        torch.manual_seed(self.seed)
        self.model = nn.Sequential(
            nn.Conv2d(1, 32, 5), nn.ReLU(), nn.Conv2d(32, 32, 5), nn.ReLU(), nn.BatchNorm2d(32), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(), nn.BatchNorm2d(64), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(576, 10))
        self.opt = torch.optim.Adam(self.model.parameters(), lr=self.lr)
        self.loss_fn = nn.CrossEntropyLoss()

    def train_step(self, x: np.ndarray, y: np.ndarray) -> float:
        self.model.train()
        self.opt.zero_grad()
        loss = self.loss_fn(self.model(self.torch.from_numpy(x)), self.torch.from_numpy(y).long())
        loss.backward()
        self.opt.step()
        return float(loss.item())

    def predict(self, x: np.ndarray) -> np.ndarray:
        self.model.eval()
        with self.torch.no_grad():
            out: np.ndarray = self.model(self.torch.from_numpy(x)).argmax(1).numpy()
            return out


class TinygradTrainer(Trainer):
    """tinygrad 0.14.0 and this project: the same code (beautiful_mnist's shape), a TinyJit train step."""

    def __init__(self, framework: str, **params: Any):
        super().__init__(**params)
        import tinygrad
        self.Context = tinygrad.Context
        # This project checks class indices on the host by default (like PyTorch); a TinyJit capture cannot
        # read the host, so the step turns the check off with its documented knob. The labels are valid.
        self.knobs = {"TRAINING": 1, **({"CHECK_INDICES": 0} if framework == "ours" else {})}
        try:
            from tinygrad import nn
            from tinygrad.nn.optim import Adam
            from tinygrad.nn.state import get_parameters
        except ImportError as err:
            raise NotAvailable(f"tinygrad.nn missing ({err})") from err
        Tensor = self.Tensor = tinygrad.Tensor
        Tensor.manual_seed(self.seed)
        self.layers: list[Callable[[Any], Any]] = [
            nn.Conv2d(1, 32, 5), Tensor.relu, nn.Conv2d(32, 32, 5), Tensor.relu, nn.BatchNorm(32), Tensor.max_pool2d,
            nn.Conv2d(32, 64, 3), Tensor.relu, nn.Conv2d(64, 64, 3), Tensor.relu, nn.BatchNorm(64), Tensor.max_pool2d,
            lambda x: x.flatten(1), nn.Linear(576, 10)]
        self.opt = Adam(get_parameters(self.layers), lr=self.lr)
        tiny_jit = getattr(tinygrad, "TinyJit", None)
        # without TinyJit (this project before it lands) the same step runs eagerly; info() says which
        self.jitted = tiny_jit is not None
        self.step_fn = tiny_jit(self._step) if tiny_jit is not None else self._step

    def _step(self, x: Any, y: Any) -> Any:
        self.opt.zero_grad()
        loss = x.sequential(self.layers).sparse_categorical_crossentropy(y).backward()
        # the loss and the update in one schedule, as both tinygrad's and this project's examples step (a separate
        # opt.step() and loss.realize() compute the forward pass twice)
        return loss.realize(*self.opt.schedule_step())

    def train_step(self, x: np.ndarray, y: np.ndarray) -> float:
        inputs = self.Tensor(x).realize(), self.Tensor(y).realize()
        with self.Context(**self.knobs):
            loss = self.step_fn(*inputs)
        return float(loss.item())

    def predict(self, x: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.Tensor(x).sequential(self.layers).argmax(1).numpy()
        return out


def make(framework: str, workload: str, params: dict[str, Any]) -> TrainChunk:
    if workload != "train":
        raise NotAvailable(f"unknown workload {workload}")
    if framework == "numpy":
        raise NotAvailable("numpy has no autograd")
    if (why := fashion_mnist.missing_reason()) is not None:
        raise NotAvailable(why)
    return TorchTrainer(**params) if framework == "torch" else TinygradTrainer(framework, **params)


def info(framework: str) -> dict[str, Any]:
    found = cpu_info(framework)
    if "TinyJit" in found:
        found["train step"] = "TinyJit" if found.pop("TinyJit") == "yes" else "eager (TinyJit missing)"
    return found
