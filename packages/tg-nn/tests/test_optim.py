"""Optimizers step for step against torch.optim (or, where PyTorch has no such optimizer, a numpy reference of the
published rule) over 10 steps of a small two-layer model."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import close
from tinygrad import Context, Tensor, dtypes, nn
from tinygrad.nn import optim
from tinygrad.nn.state import get_parameters

torch = pytest.importorskip("torch", reason="torch.optim is the reference (pip install torch==2.13.0)")

STEPS = 10
RNG = np.random.default_rng(0)
X = RNG.standard_normal((6, 4)).astype(np.float32)
Y = RNG.standard_normal((6, 3)).astype(np.float32)
INIT = [RNG.standard_normal(s).astype(np.float32) * 0.5 for s in [(8, 4), (8,), (3, 8), (3,)]]


class Model:
    def __init__(self):
        self.l1, self.l2 = nn.Linear(4, 8), nn.Linear(8, 3)
        for t, v in zip([self.l1.weight, self.l1.bias, self.l2.weight, self.l2.bias], INIT):
            t.assign(Tensor(v.copy())).realize()

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).tanh())


def torch_model():
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    with torch.no_grad():
        for p, v in zip(m.parameters(), INIT):
            p.copy_(torch.tensor(v))
    return m


def loss_of(out, y):
    return ((out - y) ** 2).mean()


def compare(make_ours, make_theirs, atol=1e-5, rtol=1e-4, steps=STEPS):
    """Train both for `steps` steps; after each, every parameter must agree."""
    model, ref = Model(), torch_model()
    opt, ropt = make_ours(get_parameters(model)), make_theirs(list(ref.parameters()))
    x, y = Tensor(X), Tensor(Y)
    with Context(TRAINING=1):
        for _ in range(steps):
            opt.zero_grad()
            loss = loss_of(model(x), y)
            loss.backward()
            opt.step()
            ropt.zero_grad()
            loss_of(ref(torch.tensor(X)), torch.tensor(Y)).backward()
            ropt.step()
            for ours, theirs in zip(get_parameters(model), ref.parameters()):
                close(ours, theirs, atol, rtol)
    return model, opt


@pytest.mark.parametrize("kw", [dict(lr=0.1), dict(lr=0.05, momentum=0.9), dict(lr=0.05, momentum=0.9, nesterov=True),
                                dict(lr=0.1, weight_decay=0.05), dict(lr=0.05, momentum=0.8, weight_decay=0.1,
                                                                      nesterov=True)])
def test_sgd(kw):
    compare(lambda p: optim.SGD(p, **kw), lambda p: torch.optim.SGD(p, **kw))


def test_sgd_classic_momentum_matches_for_constant_lr():
    compare(lambda p: optim.SGD(p, lr=0.05, momentum=0.9, classic=True),
            lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9))


@pytest.mark.parametrize("kw,tkw", [(dict(lr=0.01), dict(lr=0.01)),
                                    (dict(lr=0.02, b1=0.8, b2=0.99, eps=1e-6), dict(lr=0.02, betas=(0.8, 0.99),
                                                                                     eps=1e-6))])
def test_adam(kw, tkw):
    compare(lambda p: optim.Adam(p, **kw), lambda p: torch.optim.Adam(p, **tkw))


def test_adam_updates_each_parameter_in_one_kernel():
    # the new moments and the new weight of a parameter are stored by one kernel (the scheduler's further outputs);
    # the step count, b2**t and b1**t (read by every parameter's kernel) are one kernel each
    params = [Tensor(np.ones(s, np.float32), requires_grad=True) for s in [(8, 4), (8,), (3, 8)]]
    opt = optim.Adam(params, lr=0.01)
    for p in params:
        p.grad = Tensor(np.full(p.shape, 0.5, np.float32)).realize()
    with Context(TRAINING=1):
        schedule = Tensor.schedule(*opt.schedule_step())
    assert sum(1 for si in schedule if not si.is_copy) == len(params) + 3
    assert sorted(si.outs for si in schedule) == [1, 1, 1, 3, 3, 3]


@pytest.mark.parametrize("wd", [0.01, 0.3])
def test_adamw(wd):
    compare(lambda p: optim.AdamW(p, lr=0.02, weight_decay=wd), lambda p: torch.optim.AdamW(p, lr=0.02,
                                                                                             weight_decay=wd))


class NumpyOptimizer:
    """A numpy reference for optimizers PyTorch lacks, wrapped to look like a torch optimizer for `compare`."""

    def __init__(self, params, rule):
        self.params, self.rule, self.state = params, rule, [dict() for _ in params]

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        with torch.no_grad():
            for p, st in zip(self.params, self.state):
                new = self.rule(p.detach().numpy().astype(np.float64), p.grad.numpy().astype(np.float64), st)
                p.copy_(torch.tensor(new.astype(np.float32)))


def lamb_rule(lr, b1, b2, eps, wd):
    def rule(w, g, st):
        st["t"] = st.get("t", 0) + 1
        st["m"] = b1 * st.get("m", 0) + (1 - b1) * g
        st["v"] = b2 * st.get("v", 0) + (1 - b2) * g * g
        up = (st["m"] / (1 - b1 ** st["t"])) / (np.sqrt(st["v"] / (1 - b2 ** st["t"])) + eps) + wd * w
        wn, un = np.linalg.norm(w), np.linalg.norm(up)
        trust = wn / un if wn > 0 and un > 0 else 1.0
        return w - lr * trust * up
    return rule


def lars_rule(lr, momentum, wd, tcoef):
    def rule(w, g, st):
        wn, gn = np.linalg.norm(w), np.linalg.norm(g)
        trust = tcoef * wn / (gn + wd * wn) if wn > 0 and gn > 0 else 1.0
        st["b"] = momentum * st.get("b", 0) + lr * trust * (g + wd * w)
        return w - st["b"]
    return rule


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_lamb(wd):
    compare(lambda p: optim.LAMB(p, lr=0.02, weight_decay=wd),
            lambda p: NumpyOptimizer(p, lamb_rule(0.02, 0.9, 0.999, 1e-6, wd)))


def test_lars():
    compare(lambda p: optim.LARS(p, lr=0.5, momentum=0.9, weight_decay=0.01, tcoef=0.02),
            lambda p: NumpyOptimizer(p, lars_rule(0.5, 0.9, 0.01, 0.02)))


def _torch_newton_schulz_fp32(grad, ns_coefficients, ns_steps, eps):
    """torch.optim.Muon's iteration in float32 (PyTorch runs it in bfloat16, too coarse to compare with)."""
    a, b, c = ns_coefficients
    x = grad.float()
    wide = grad.size(0) > grad.size(1)
    x = x.T if wide else x
    x = x / (x.norm() + eps)
    for _ in range(ns_steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if wide else x


@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_with_adamw_group(nesterov, monkeypatch):
    import torch.optim._muon as muon_module

    monkeypatch.setattr(muon_module, "_zeropower_via_newtonschulz", _torch_newton_schulz_fp32)

    def ours(params):
        mats = [p for p in params if p.ndim == 2]
        return optim.OptimizerGroup(optim.Muon(mats, lr=0.02, weight_decay=0.1, nesterov=nesterov),
                                    optim.AdamW([p for p in params if p.ndim != 2], lr=0.01))

    class TorchPair:
        def __init__(self, params):
            self.opts = [torch.optim.Muon([p for p in params if p.ndim == 2], lr=0.02, weight_decay=0.1,
                                          nesterov=nesterov),
                         torch.optim.AdamW([p for p in params if p.ndim != 2], lr=0.01)]

        def zero_grad(self):
            for o in self.opts:
                o.zero_grad()

        def step(self):
            for o in self.opts:
                o.step()

    compare(ours, TorchPair, atol=1e-4, rtol=1e-3)


def test_muon_rejects_vectors():
    with pytest.raises(ValueError, match="matrices only"):
        optim.Muon([Tensor.ones(3, requires_grad=True)])


def test_param_groups_match_torch():
    def ours(params):
        return optim.param_groups(optim.SGD, [{"params": params[:2], "lr": 0.2}, {"params": params[2:]}],
                                  lr=0.05, momentum=0.9)

    def theirs(params):
        return torch.optim.SGD([{"params": params[:2], "lr": 0.2}, {"params": params[2:]}], lr=0.05, momentum=0.9)

    _, opt = compare(ours, theirs)
    assert isinstance(opt, optim.OptimizerGroup) and len(opt) == 2 and opt[0].lr.item() == pytest.approx(0.2)


def test_schedule_step_realizes_with_the_loss():
    model, ref_model = Model(), Model()
    opt, ref_opt = optim.Adam(get_parameters(model), lr=0.05), optim.Adam(get_parameters(ref_model), lr=0.05)
    x, y = Tensor(X), Tensor(Y)
    with Context(TRAINING=1):
        for _ in range(3):
            opt.zero_grad()
            loss = loss_of(model(x), y)
            loss.backward()
            changed = opt.schedule_step()
            assert all(any(c is p for c in changed) for p in get_parameters(model))
            Tensor.realize(loss, *changed)
            ref_opt.zero_grad()
            loss_of(ref_model(x), y).backward()
            ref_opt.step()
    for a, b in zip(get_parameters(model), get_parameters(ref_model)):
        close(a, b, 1e-6)


def test_clip_grad_norm_matches_torch():
    model, ref = Model(), torch_model()
    loss_of(model(Tensor(X)), Tensor(Y)).backward()
    loss_of(ref(torch.tensor(X)), torch.tensor(Y)).backward()
    params = get_parameters(model)
    total = optim.clip_grad_norm_(params, 0.05)
    ref_total = torch.nn.utils.clip_grad_norm_(list(ref.parameters()), 0.05)
    close(total, ref_total)
    for p, q in zip(params, ref.parameters()):
        close(p.grad, q.grad)
    # a norm under the limit leaves the gradients alone
    before = [p.grad.numpy() for p in params]
    optim.clip_grad_norm_(params, 100.0)
    for p, b in zip(params, before):
        close(p.grad, b, 1e-6)


class PlainModel:
    """The Model's layers as plain tensors, as tinygrad's README writes them: no requires_grad anywhere."""

    def __init__(self):
        self.w1, self.b1, self.w2, self.b2 = (Tensor(v.copy()) for v in INIT)

    def __call__(self, x: Tensor) -> Tensor:
        return (x.linear(self.w1.T, self.b1).tanh()).linear(self.w2.T, self.b2)


@pytest.mark.parametrize("make, tmake", [(lambda p: optim.SGD(p, lr=0.05, momentum=0.9),
                                          lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)),
                                         (lambda p: optim.Adam(p, lr=0.02), lambda p: torch.optim.Adam(p, lr=0.02))])
def test_tensors_without_requires_grad_become_parameters(make, tmake):
    # tinygrad: requires_grad None (the default) becomes True when the tensor is given to an optimizer
    model, ref = PlainModel(), torch_model()
    params = [model.w1, model.b1, model.w2, model.b2]
    assert all(p.requires_grad is None for p in params)
    opt, ropt = make(params), tmake(list(ref.parameters()))
    assert all(p.requires_grad is True for p in params) and opt.buffers == []
    x, y = Tensor(X), Tensor(Y)
    with Context(TRAINING=1):
        for _ in range(3):
            opt.zero_grad()
            loss_of(model(x), y).backward()
            opt.step()
            ropt.zero_grad()
            loss_of(ref(torch.tensor(X)), torch.tensor(Y)).backward()
            ropt.step()
            for ours, theirs in zip(params, ref.parameters()):
                close(ours, theirs, 1e-5, 1e-4)


def test_requires_grad_false_tensors_stay_buffers():
    w, frozen = Tensor(INIT[0].copy()), Tensor(INIT[1].copy(), requires_grad=False)
    opt = optim.SGD([w, frozen], lr=0.1)
    assert opt.params == [w] and opt.buffers == [frozen] and frozen.requires_grad is False
    before = frozen.numpy().copy()
    with Context(TRAINING=1):
        opt.zero_grad()
        (Tensor(X).linear(w.T, frozen) ** 2).mean().backward()
        assert frozen.grad is None
        opt.step()
    np.testing.assert_array_equal(frozen.numpy(), before)


def test_step_needs_training_mode_and_gradients():
    model = Model()
    opt = optim.SGD(get_parameters(model), lr=0.1)
    assert not nn.is_training()
    with pytest.raises(RuntimeError, match="training mode"):
        opt.step()
    with Context(TRAINING=1), pytest.raises(RuntimeError, match="no gradient"):
        opt.step()
    with pytest.raises(ValueError, match="requires_grad=False"):
        optim.Adam([Tensor.ones(2, requires_grad=False), Tensor.ones(2, dtype=dtypes.int32)])
    with pytest.raises(TypeError, match="list of tensors"):
        optim.Adam(Tensor.ones(2, requires_grad=True))


def test_buffers_are_realized_with_the_step(training):
    bn = nn.BatchNorm(3)
    lin = nn.Linear(3, 3)
    params = get_parameters([lin, bn])
    opt = optim.SGD(params, lr=0.01)
    assert {id(bn.running_mean), id(bn.num_batches_tracked)} <= {id(b) for b in opt.buffers}
    for _ in range(2):
        opt.zero_grad()
        bn(lin(Tensor(X[:, :3]))).sum().backward()
        opt.step()
    assert bn.num_batches_tracked.numpy().tolist() == [2]


@pytest.mark.parametrize("opt", [optim.LAMB, optim.Adam])
def test_optimizer_state_moved_to_the_cpu_updates_sharded_parameters(opt, training):
    """Offloading the moments (`m.to_("CPU")`) of a parameter sharded over devices: the step computes where the
    moments live, and the parameter keeps its devices and sharding."""
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    t = Tensor(x.copy(), requires_grad=True).shard(("CPU:0", "CPU:1"), axis=1)
    o = opt([t])
    for s in o.m + o.v:
        s.to_("CPU")
    ref = Tensor(x.copy(), requires_grad=True)
    r = opt([ref])
    for _ in range(2):
        for p, step in ((t, o), (ref, r)):
            step.zero_grad()
            (p * p).sum().backward()
            step.step()
    assert t.device == ("CPU", "CPU:1") and t.uop.axis == 1  # CPU:0 is the CPU and o.m[0].device == "CPU"
    close(t, ref.numpy(), atol=1e-6, rtol=1e-6)
