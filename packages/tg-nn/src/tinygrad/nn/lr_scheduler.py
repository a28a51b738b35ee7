"""Learning-rate schedules, with PyTorch's names and formulas. Each `step()` (once per epoch or per batch, as the
schedule is meant) writes the next rate into the optimizer's `lr` tensor, which the optimizer's step reads.

    sched = CosineAnnealingLR(opt, T_max=100)
    for _ in range(100): train_one_epoch(); sched.step()
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

from tinygrad.nn.optim import Optimizer, OptimizerGroup
from tinygrad.nn.training import write_in_place


def _leaf_optimizers(opt: Optimizer) -> list[Optimizer]:
    return [o for sub in opt.optimizers for o in _leaf_optimizers(sub)] if isinstance(opt, OptimizerGroup) else [opt]


class LRScheduler:
    """Base: `lr_at(t)` is the rate after t steps; the base rate is the optimizer's rate when the schedule starts
    (for an OptimizerGroup, each optimizer keeps its own base rate and they are all scaled alike)."""

    def __init__(self, optimizer: Optimizer):
        self.optimizer = optimizer
        self.optimizers = _leaf_optimizers(optimizer)
        self.base_lrs = [float(o.lr.item()) for o in self.optimizers]
        self.epoch_counter = 0
        self._apply()

    def factor_at(self, t: int) -> float:
        """The rate after t steps as a multiple of the base rate."""
        raise NotImplementedError(f"{type(self).__name__} must define factor_at")

    def get_lr(self) -> list[float]:
        f = self.factor_at(self.epoch_counter)
        return [base * f for base in self.base_lrs]

    def step(self) -> None:
        self.epoch_counter += 1
        self._apply()

    def _apply(self) -> None:
        # in place: a TinyJit train step captured before reads the rate from this buffer
        for o, lr in zip(self.optimizers, self.get_lr()):
            write_in_place(o.lr, lr)


class LambdaLR(LRScheduler):
    """base rate * lr_lambda(t)."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float]):
        self.lr_lambda = lr_lambda
        super().__init__(optimizer)

    def factor_at(self, t: int) -> float:
        return float(self.lr_lambda(t))


class StepLR(LRScheduler):
    """base rate * gamma ** (t // step_size)."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1):
        if step_size < 1:
            raise ValueError(f"StepLR: step_size must be >= 1, got {step_size}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def factor_at(self, t: int) -> float:
        return self.gamma ** (t // self.step_size)


class MultiStepLR(LRScheduler):
    """base rate * gamma ** (number of milestones <= t)."""

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer)

    def factor_at(self, t: int) -> float:
        return self.gamma ** bisect.bisect_right(self.milestones, t)


class LinearLR(LRScheduler):
    """Linear warmup (or decay): the factor goes from start_factor to end_factor over total_iters steps, then stays."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1 / 3, end_factor: float = 1.0,
                 total_iters: int = 5):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1 or total_iters < 0:
            raise ValueError(f"LinearLR: needs 0 < start_factor <= 1, 0 <= end_factor <= 1 and total_iters >= 0, "
                             f"got {start_factor}, {end_factor}, {total_iters}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer)

    def factor_at(self, t: int) -> float:
        if self.total_iters == 0:
            return self.end_factor
        return self.start_factor + (self.end_factor - self.start_factor) * min(t, self.total_iters) / self.total_iters


class CosineAnnealingLR(LRScheduler):
    """eta_min + (base - eta_min) * (1 + cos(pi * t / T_max)) / 2."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0):
        if T_max < 1:
            raise ValueError(f"CosineAnnealingLR: T_max must be >= 1, got {T_max}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:
        c = (1 + math.cos(math.pi * self.epoch_counter / self.T_max)) / 2
        return [self.eta_min + (base - self.eta_min) * c for base in self.base_lrs]


class OneCycleLR(LRScheduler):
    """The one-cycle policy (Smith 2018), PyTorch's two-phase form: from max_lr/div_factor up to max_lr over the
    first pct_start of total_steps, then down to max_lr/div_factor/final_div_factor, by cosine or linear annealing.
    With cycle_momentum (the default, as in PyTorch) the momentum (SGD's momentum, Adam's b1: the optimizer's
    `beta`) moves the other way, from max_momentum down to base_momentum and back."""

    def __init__(self, optimizer: Optimizer, max_lr: float, total_steps: int, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", div_factor: float = 25.0, final_div_factor: float = 1e4,
                 cycle_momentum: bool = True, base_momentum: float = 0.85, max_momentum: float = 0.95):
        if total_steps < 1 or not 0 < pct_start < 1:
            raise ValueError(f"OneCycleLR: needs total_steps >= 1 and 0 < pct_start < 1, got {total_steps}, "
                             f"{pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy is 'cos' or 'linear', got {anneal_strategy!r}")
        if cycle_momentum and (without := [type(o).__name__ for o in _leaf_optimizers(optimizer) if o.beta is None]):
            raise ValueError(f"OneCycleLR: cycle_momentum needs an optimizer with a momentum, but {without} has none "
                             f"(SGD with momentum=0?); give it a momentum or pass cycle_momentum=False")
        self.max_lr, self.total_steps, self.anneal_strategy = max_lr, total_steps, anneal_strategy
        self.initial_lr = max_lr / div_factor
        self.min_lr = self.initial_lr / final_div_factor
        self.peak_step = float(pct_start * total_steps) - 1
        self.cycle_momentum, self.base_momentum, self.max_momentum = cycle_momentum, base_momentum, max_momentum
        super().__init__(optimizer)

    def _apply(self) -> None:
        super()._apply()
        if self.cycle_momentum:
            beta = self.momentum_at(self.epoch_counter)
            for o in self.optimizers:
                assert o.beta is not None
                write_in_place(o.beta, beta)

    def _phase(self, t: int) -> tuple[bool, float]:
        """(whether step t is in the warm-up phase, how far into its phase it is, 0..1)."""
        if t <= self.peak_step:
            return True, t / self.peak_step if self.peak_step > 0 else 1.0
        span = (self.total_steps - 1) - self.peak_step
        return False, (t - self.peak_step) / span if span > 0 else 1.0

    def momentum_at(self, t: int) -> float:
        warm, pct = self._phase(t)
        if warm:
            return self._anneal(self.max_momentum, self.base_momentum, pct)
        return self._anneal(self.base_momentum, self.max_momentum, pct)

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2 * (math.cos(math.pi * pct) + 1)
        return start + (end - start) * pct

    def get_lr(self) -> list[float]:
        t = self.epoch_counter
        if t > self.total_steps:
            raise ValueError(f"OneCycleLR stepped {t} times, past total_steps={self.total_steps}; make total_steps "
                             f"the number of step() calls of the whole run")
        warm, pct = self._phase(t)
        lr = self._anneal(self.initial_lr, self.max_lr, pct) if warm else self._anneal(self.max_lr, self.min_lr, pct)
        return [lr] * len(self.base_lrs)
