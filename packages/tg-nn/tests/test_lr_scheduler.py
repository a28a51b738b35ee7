"""Learning-rate schedules: the rate after each step against torch.optim.lr_scheduler."""

from __future__ import annotations

import pytest
from tinygrad import Tensor
from tinygrad.nn import lr_scheduler, optim

torch = pytest.importorskip("torch", reason="torch.optim.lr_scheduler is the reference (pip install torch==2.13.0)")


def pair(make_ours, make_theirs, lr=0.1, steps=25):
    opt = optim.SGD([Tensor.ones(2, requires_grad=True)], lr=lr)
    topt = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=lr)
    ours, theirs = make_ours(opt), make_theirs(topt)
    got, want = [opt.lr.item()], [topt.param_groups[0]["lr"]]
    for _ in range(steps):
        topt.step()  # PyTorch warns unless the optimizer steps before the schedule
        ours.step()
        theirs.step()
        got.append(opt.lr.item())
        want.append(topt.param_groups[0]["lr"])
    assert got == pytest.approx(want, rel=1e-5, abs=1e-9)
    return opt


def test_step_lr():
    pair(lambda o: lr_scheduler.StepLR(o, 4, 0.5), lambda o: torch.optim.lr_scheduler.StepLR(o, 4, 0.5))


def test_multistep_lr():
    pair(lambda o: lr_scheduler.MultiStepLR(o, [3, 10, 11], 0.3),
         lambda o: torch.optim.lr_scheduler.MultiStepLR(o, [3, 10, 11], 0.3))


def test_cosine_annealing():
    pair(lambda o: lr_scheduler.CosineAnnealingLR(o, 20, eta_min=0.01),
         lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 20, eta_min=0.01), steps=20)


@pytest.mark.parametrize("kw", [dict(), dict(start_factor=0.1, end_factor=1.0, total_iters=8),
                                dict(start_factor=1.0, end_factor=0.2, total_iters=10)])
def test_linear_warmup(kw):
    pair(lambda o: lr_scheduler.LinearLR(o, **kw), lambda o: torch.optim.lr_scheduler.LinearLR(o, **kw))


@pytest.mark.parametrize("kw", [dict(), dict(pct_start=0.25, anneal_strategy="linear", div_factor=10,
                                             final_div_factor=100)])
def test_one_cycle(kw):
    opt = pair(lambda o: lr_scheduler.OneCycleLR(o, max_lr=0.5, total_steps=30, cycle_momentum=False, **kw),
               lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.5, total_steps=30, cycle_momentum=False,
                                                              **kw), steps=29)
    # the last step ends at the minimum rate, max_lr / div_factor / final_div_factor
    assert opt.lr.item() == pytest.approx(0.5 / kw.get("div_factor", 25) / kw.get("final_div_factor", 1e4), rel=1e-5)


def test_one_cycle_past_the_end():
    opt = optim.SGD([Tensor.ones(2, requires_grad=True)], lr=0.1)
    sched = lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=3, cycle_momentum=False)
    for _ in range(3):
        sched.step()
    with pytest.raises(ValueError, match="total_steps"):
        sched.step()


@pytest.mark.parametrize("which", ["sgd", "adam"])
def test_one_cycle_cycles_momentum_and_trains_like_pytorch(which):
    """SGD's momentum and Adam's b1 go from 0.95 down to 0.85 and back while the rate rises and falls, and the
    parameters follow PyTorch's step for step (Adam's bias correction takes b1 as it is at each step)."""
    import numpy as np
    from tinygrad import Context
    start = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    w, tw = Tensor(start, requires_grad=True), torch.nn.Parameter(torch.tensor(start))
    if which == "sgd":
        opt, topt = optim.SGD([w], lr=0.1, momentum=0.9), torch.optim.SGD([tw], lr=0.1, momentum=0.9)
    else:
        opt, topt = optim.Adam([w], lr=0.1), torch.optim.Adam([tw], lr=0.1)
    ours = lr_scheduler.OneCycleLR(opt, max_lr=0.3, total_steps=12)
    theirs = torch.optim.lr_scheduler.OneCycleLR(topt, max_lr=0.3, total_steps=12)
    key = "momentum" if which == "sgd" else "betas"
    betas = []
    for _ in range(11):
        got = opt.beta.item()
        want = topt.param_groups[0][key] if which == "sgd" else topt.param_groups[0][key][0]
        betas.append(got)
        assert got == pytest.approx(want, rel=1e-6)
        with Context(TRAINING=1):
            opt.zero_grad()
            (w * w * Tensor([1.0, 2.0, 0.5])).sum().backward()
            opt.step()
        topt.zero_grad()
        (tw * tw * torch.tensor([1.0, 2.0, 0.5])).sum().backward()
        topt.step()
        ours.step()
        theirs.step()
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-4, atol=1e-5)  # test_optim's tolerances
    assert betas[0] == pytest.approx(0.95) and min(betas) == pytest.approx(0.85, abs=0.01)


def test_one_cycle_of_momentum_needs_an_optimizer_with_one():
    opt = optim.SGD([Tensor.ones(2, requires_grad=True)], lr=0.1)  # momentum 0
    with pytest.raises(ValueError, match="cycle_momentum=False"):
        lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=3)


def test_lambda_and_group():
    a = optim.SGD([Tensor.ones(2, requires_grad=True)], lr=0.1)
    b = optim.Adam([Tensor.ones(3, requires_grad=True)], lr=0.01)
    sched = lr_scheduler.LambdaLR(optim.OptimizerGroup(a, b), lambda t: 0.5 ** t)
    for _ in range(3):
        sched.step()
    assert a.lr.item() == pytest.approx(0.1 / 8) and b.lr.item() == pytest.approx(0.01 / 8)
    assert sched.get_lr()[0] == pytest.approx(0.0125)


@pytest.mark.parametrize("cycle_momentum", [False, True])
def test_a_schedule_reaches_a_tinyjit_train_step(cycle_momentum):
    """The schedule writes the rate (and the momentum) into the buffers the captured kernels read: replays follow
    it exactly as eager steps do (with a new buffer per step, the replays kept the rate of the capture)."""
    import numpy as np
    from tinygrad import Context, TinyJit

    def train(jit):
        w = Tensor(np.array([1.0, -2.0, 3.0], dtype=np.float32), requires_grad=True)
        opt = optim.Adam([w], lr=0.1)
        sched = lr_scheduler.OneCycleLR(opt, max_lr=0.3, total_steps=12, cycle_momentum=cycle_momentum)

        def step(c):
            with Context(TRAINING=1):
                opt.zero_grad()
                return (w * w * c).sum().backward().realize(*opt.schedule_step())
        if jit:
            step = TinyJit(step)
        for _ in range(11):
            step(Tensor([1.0, 2.0, 0.5]))
            sched.step()
        return w.numpy()

    np.testing.assert_allclose(train(jit=True), train(jit=False), rtol=1e-6, atol=1e-7)
