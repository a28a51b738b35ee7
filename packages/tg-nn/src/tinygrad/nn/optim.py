"""Optimizers. Each keeps its state (learning rate, moments, step counts) in tensors, so that a `TinyJit` captured
step replays with the state it updates, and a learning-rate schedule can change `opt.lr` between replays.

    opt = Adam(get_parameters(model), lr=1e-3)
    with Context(TRAINING=1):           # or Tensor.training = True
        opt.zero_grad(); loss = model(x).sparse_categorical_crossentropy(y); loss.backward()
        Tensor.realize(loss, *opt.schedule_step())   # the step and the loss in one schedule
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, cast

from tinygrad import Tensor, dtypes
from tinygrad.nn.training import fresh_buffer, is_training


def _dedup(tensors: Iterable[Tensor]) -> list[Tensor]:
    seen: dict[int, Tensor] = {}
    for t in tensors:
        seen.setdefault(id(t), t)
    return list(seen.values())


def _scalar(value: float, device: str | tuple[str, ...]) -> Tensor:
    return fresh_buffer(value, (), dtypes.float32, device)


class Optimizer:
    """Base: the floating-point tensors of `params` whose requires_grad is not False are optimised, and those left
    at tinygrad's default None become requires_grad=True here (tinygrad: "becomes a parameter when put in an
    optimizer"). The others (BatchNorm running statistics, counters: requires_grad=False or not floating point)
    are `buffers`, realized with every step so that lazy updates made in the forward pass do not pile up."""

    def __init__(self, params: Sequence[Tensor], lr: float, device: str | None = None):
        if isinstance(params, Tensor):
            raise TypeError("an optimizer takes a list of tensors, not one tensor; wrap it: [t]")
        params = _dedup(params)
        if lr < 0:
            raise ValueError(f"the learning rate must be >= 0, got {lr}")
        self.params = [p for p in params if p.requires_grad is not False and p.dtype.is_float]
        self.buffers = [p for p in params if p.requires_grad is False or not p.dtype.is_float]
        if not self.params:
            raise ValueError("the optimizer got no tensor to optimise: each one has requires_grad=False or is not "
                             "floating point; pass the model's parameters (nn.state.get_parameters(model))")
        for p in self.params:
            p.requires_grad = True
        self.device = device or self.params[0].device
        self.lr = _scalar(lr, self.device)
        # the momentum coefficient a schedule may cycle (SGD's momentum, Adam's b1; None: the optimizer has none),
        # a tensor like lr so that a TinyJit replay reads its current value
        self.beta: Tensor | None = None

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """Update the parameters now."""
        Tensor.realize(*self.schedule_step())

    def schedule_step(self) -> list[Tensor]:
        """Make the update lazily and return every tensor it changes; realize them together with the loss
        (`Tensor.realize(loss, *opt.schedule_step())`) to run the whole step as one schedule."""
        if not is_training():
            raise RuntimeError("the optimizer only steps in training mode: set `Tensor.training = True` or wrap the "
                               "step in `with Context(TRAINING=1):`")
        missing = [i for i, p in enumerate(self.params) if p.grad is None]
        if missing:
            raise RuntimeError(f"parameters {missing} (of {len(self.params)}, shapes "
                               f"{[self.params[i].shape for i in missing]}) have no gradient: call loss.backward() "
                               f"before the step, on a loss that depends on them")
        updates = self._updates([cast(Tensor, p.grad).detach().float() for p in self.params])
        for p, new in zip(self.params, updates):
            p.assign(new.detach().cast(p.dtype))
        return self.params + self.buffers + self._state()

    def _updates(self, grads: list[Tensor]) -> list[Tensor]:
        """The new value of each parameter, given its float32 gradient."""
        raise NotImplementedError(f"{type(self).__name__} must define _updates")

    def _state(self) -> list[Tensor]:
        """The optimizer's own state tensors that a step changes."""
        return []


class OptimizerGroup(Optimizer):
    """Several optimizers stepped as one (parameter groups: each optimizer with its own options)."""

    def __init__(self, *optimizers: Optimizer):
        # no super().__init__: a group has no learning rate or parameters of its own beyond its members'
        if not optimizers:
            raise ValueError("OptimizerGroup needs at least one optimizer")
        self.optimizers = list(optimizers)
        self.params = [p for o in optimizers for p in o.params]
        self.buffers = [b for o in optimizers for b in o.buffers]

    def __getitem__(self, i: int) -> Optimizer:
        return self.optimizers[i]

    def __len__(self) -> int:
        return len(self.optimizers)

    def zero_grad(self) -> None:
        for o in self.optimizers:
            o.zero_grad()

    def schedule_step(self) -> list[Tensor]:
        return [t for o in self.optimizers for t in o.schedule_step()]


def param_groups(cls: type[Optimizer], groups: Sequence[dict[str, Any]], **defaults: Any) -> OptimizerGroup:
    """PyTorch-style parameter groups: `param_groups(SGD, [{"params": a, "lr": 0.1}, {"params": b}], lr=0.01)`
    is one optimizer of `cls` per group, each with the defaults overridden by the group's own options."""
    opts = []
    for i, g in enumerate(groups):
        if "params" not in g:
            raise ValueError(f"parameter group {i} has no 'params' entry; each group is a dict "
                             f"{{'params': [...], ...}}")
        options = {**defaults, **{k: v for k, v in g.items() if k != "params"}}
        opts.append(cls(list(g["params"]), **options))
    return OptimizerGroup(*opts)


def clip_grad_norm_(params: Sequence[Tensor], max_norm: float, eps: float = 1e-6) -> Tensor:
    """Scale every gradient by min(1, max_norm / (total L2 norm + eps)), as `torch.nn.utils.clip_grad_norm_`;
    returns the total norm before clipping (lazy)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        raise RuntimeError("clip_grad_norm_: no parameter has a gradient; call loss.backward() first")
    total = sum((g.float().square().sum() for g in grads[1:]), grads[0].float().square().sum()).sqrt()
    scale = (max_norm / (total + eps)).minimum(1.0)
    for p in params:
        if p.grad is not None:
            p.grad = (p.grad * scale).cast(p.grad.dtype)
    return total


class LARS(Optimizer):
    """SGD with momentum and a layer-wise trust ratio tcoef * ||w|| / (||g|| + wd * ||w||) (You et al. 2017; off
    with tcoef=0, which is plain SGD). `classic`: the learning rate goes into the momentum buffer
    (b = m*b + lr*g; w -= b) instead of scaling it (b = m*b + g; w -= lr*b, PyTorch's SGD); the two differ only
    when the learning rate changes. `pre_wd`: weight decay is added to the gradient before the trust ratio and
    momentum (L2, PyTorch's SGD), else it is applied to the weights apart from them (decoupled)."""

    def __init__(self, params: Sequence[Tensor], lr: float = 0.001, momentum: float = 0.9, weight_decay: float = 1e-4,
                 nesterov: bool = False, classic: bool = True, pre_wd: bool = True, tcoef: float = 0.001,
                 device: str | None = None):
        super().__init__(params, lr, device)
        if momentum < 0 or weight_decay < 0:
            raise ValueError(f"momentum and weight_decay must be >= 0, got {momentum} and {weight_decay}")
        if nesterov and momentum == 0:
            raise ValueError("nesterov momentum needs momentum > 0")
        self.wd, self.nesterov, self.classic = weight_decay, nesterov, classic
        self.pre_wd, self.tcoef = pre_wd, tcoef
        self.b = [fresh_buffer(0.0, p.shape, dtypes.float32, p.device)
                  for p in self.params] if momentum else []
        self.beta = _scalar(momentum, self.device) if momentum else None

    def _updates(self, grads: list[Tensor]) -> list[Tensor]:
        out = []
        for i, (p, g) in enumerate(zip(self.params, grads)):
            w = p.float()
            if self.tcoef:
                wn, gn = w.square().sum().sqrt(), g.square().sum().sqrt()
                trust = (wn > 0).where((gn > 0).where(self.tcoef * wn / (gn + self.wd * wn), 1.0), 1.0)
            if self.wd and self.pre_wd:
                g = g + self.wd * w
            if self.tcoef:
                g = g * trust
            lr = self.lr.to(p.device)
            if self.classic:
                g = g * lr
            if self.beta is not None:
                m = self.beta.to(p.device)
                self.b[i].assign(self.b[i] * m + g)
                g = g + self.b[i] * m if self.nesterov else self.b[i]
            if not self.classic:
                g = g * lr
            if self.wd and not self.pre_wd:
                g = g + lr * self.wd * w
            out.append(w - g)
        return out

    def _state(self) -> list[Tensor]:
        return self.b


def SGD(params: Sequence[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0,
        nesterov: bool = False, classic: bool = False, device: str | None = None) -> LARS:
    """PyTorch's SGD (dampening 0): LARS without the trust ratio."""
    return LARS(params, lr, momentum, weight_decay, nesterov, classic, pre_wd=True, tcoef=0.0, device=device)


class LAMB(Optimizer):
    """Adam moments with a layer-wise trust ratio ||w|| / ||update|| (You et al. 2019); `adam=True` drops the trust
    ratio, which is AdamW (decoupled weight decay), and Adam when weight_decay is 0."""

    def __init__(self, params: Sequence[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999,
                 eps: float = 1e-6, weight_decay: float = 0.0, adam: bool = False, device: str | None = None):
        super().__init__(params, lr, device)
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"betas must be in [0, 1), got b1={b1}, b2={b2}")
        self.b2, self.eps, self.wd, self.adam = b2, eps, weight_decay, adam
        self.beta = _scalar(b1, self.device)
        # the step count and b2**t, for the bias corrections: 1 - b1**t takes b1 as it is now, as PyTorch does,
        # which is what a schedule that cycles b1 (OneCycleLR) expects
        self.t, self.b2_t = _scalar(0.0, self.device), _scalar(1.0, self.device)
        self.m = [fresh_buffer(0.0, p.shape, dtypes.float32, p.device)
                  for p in self.params]
        self.v = [fresh_buffer(0.0, p.shape, dtypes.float32, p.device)
                  for p in self.params]

    def _updates(self, grads: list[Tensor]) -> list[Tensor]:
        self.t.assign(self.t + 1)
        self.b2_t.assign(self.b2_t * self.b2)
        assert self.beta is not None
        b1, b1_t = self.beta, self.beta ** self.t
        out = []
        for i, (p, g) in enumerate(zip(self.params, grads)):
            # the moments live on p's device unless the state was moved (`m.to_("CPU")` offloads it): the update is
            # computed where the first moment lives and only the step comes back to the parameter
            at = self.m[i].device
            w = p.float().to(at)
            gm = g.to(at)
            self.m[i].assign(self.m[i] * b1.to(at) + gm * (1 - b1.to(at)))
            gv = g.to(self.v[i].device)
            self.v[i].assign(self.v[i] * self.b2 + gv.square() * (1 - self.b2))
            m_hat = self.m[i] / (1 - b1_t.to(at))
            v_hat = (self.v[i] / (1 - self.b2_t.to(self.v[i].device))).to(at)
            up = m_hat / (v_hat.sqrt() + self.eps)
            if self.wd:
                up = up + self.wd * w
            if not self.adam:
                wn, un = w.square().sum().sqrt(), up.square().sum().sqrt()
                up = up * (wn > 0).where((un > 0).where(wn / un, 1.0), 1.0)
            out.append(p.float() - self.lr.to(p.device) * up.to(p.device))
        return out

    @property
    def b1_t(self) -> Tensor:
        """b1 to the power of the step count, tinygrad's name; computed from the current b1 at each step (above),
        so moving or assigning it changes nothing."""
        assert self.beta is not None
        return self.beta ** self.t

    def _state(self) -> list[Tensor]:
        return [self.t, self.b2_t, *self.m, *self.v]


def Adam(params: Sequence[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
         device: str | None = None) -> LAMB:
    """PyTorch's Adam (no weight decay)."""
    return LAMB(params, lr, b1, b2, eps, 0.0, adam=True, device=device)


def AdamW(params: Sequence[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
          weight_decay: float = 0.01, device: str | None = None) -> LAMB:
    """PyTorch's AdamW: Adam with decoupled weight decay w -= lr * wd * w."""
    return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True, device=device)


class Muon(Optimizer):
    """Momentum orthogonalised by Newton-Schulz, PyTorch's `torch.optim.Muon` rule: b = lerp(b, g, 1 - momentum);
    u = lerp(g, b, momentum) with nesterov, else b; u = NS(u); w = w * (1 - lr * wd) - lr' * u with
    lr' = lr * sqrt(max(1, rows / cols)) (`adjust_lr=False`: lr' = lr). Parameters of more than two dims are
    treated as (shape[0], rest) matrices. Only matrices: give biases and norm weights to AdamW and step both with
    an OptimizerGroup. (PyTorch runs Newton-Schulz in bfloat16; this runs it in float32.)"""

    def __init__(self, params: Sequence[Tensor], lr: float = 0.001, momentum: float = 0.95, weight_decay: float = 0.1,
                 ns_steps: int = 5, ns_coefficients: tuple[float, ...] = (3.4445, -4.775, 2.0315),
                 nesterov: bool = True, eps: float = 1e-7, adjust_lr: bool = True, device: str | None = None):
        super().__init__(params, lr, device)
        flat = [p.shape for p in self.params if p.ndim < 2]
        if flat:
            raise ValueError(f"Muon optimises matrices only, got parameters of shapes {flat}; give those to AdamW "
                             f"and combine the two optimizers with OptimizerGroup")
        self.wd, self.ns_steps, self.ns_coefficients = weight_decay, ns_steps, ns_coefficients
        self.nesterov, self.eps, self.adjust_lr = nesterov, eps, adjust_lr
        self.b = [fresh_buffer(0.0, p.shape, dtypes.float32, p.device)
                  for p in self.params]
        self.beta = _scalar(momentum, self.device)

    def _updates(self, grads: list[Tensor]) -> list[Tensor]:
        assert self.beta is not None
        out = []
        for i, (p, g) in enumerate(zip(self.params, grads)):
            w = p.float()
            m = self.beta.to(p.device)
            self.b[i].assign(self.b[i] + (g - self.b[i]) * (1 - m))
            u = g + (self.b[i] - g) * m if self.nesterov else self.b[i]
            rows, cols = p.shape[0], math.prod(p.shape[1:])
            if self.ns_steps:
                u = u.reshape(rows, cols).newton_schulz(self.ns_steps, self.ns_coefficients, self.eps).reshape(p.shape)
            lr = self.lr.to(p.device)
            scale = math.sqrt(max(1.0, rows / cols)) if self.adjust_lr else 1.0
            out.append(w * (1 - lr * self.wd) - lr * scale * u)
        return out

    def _state(self) -> list[Tensor]:
        return self.b
