"""Each layer against its torch.nn counterpart with the same weights: outputs and gradients (of the input and of
every parameter), over odd shapes and the stride/padding/dilation/groups options."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import close, from_torch
from tinygrad import Context, Tensor, dtypes, nn

torch = pytest.importorskip("torch", reason="torch is the reference for the layer tests (pip install torch==2.13.0)")


def copy_params(ours, theirs, names) -> None:
    for n in names:
        t = getattr(theirs, n)
        if t is not None:
            setattr(ours, n, Tensor(t.detach().numpy().copy(), requires_grad=True))


def check(ours, theirs, names, x_np, atol=1e-5, rtol=1e-4, grad=True):
    """Forward on the same input, then backward of a fixed random weighting of the output."""
    copy_params(ours, theirs, names)
    x = Tensor(x_np, requires_grad=x_np.dtype.kind == "f")
    xt = torch.tensor(x_np, requires_grad=x_np.dtype.kind == "f")
    out, ref = ours(x), theirs(xt)
    close(out, ref, atol, rtol)
    if not grad:
        return
    w = np.random.default_rng(1).standard_normal(ref.shape).astype(np.float32)
    (out * Tensor(w)).sum().backward()
    (ref * torch.tensor(w)).sum().backward()
    if x_np.dtype.kind == "f":
        close(x.grad, xt.grad, atol * 10, rtol * 10)
    for n in names:
        if getattr(theirs, n) is not None:
            close(getattr(ours, n).grad, getattr(theirs, n).grad, atol * 10, rtol * 10)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias):
    check(nn.Linear(7, 5, bias=bias), torch.nn.Linear(7, 5, bias=bias), ["weight", "bias"], rand(3, 2, 7))


def test_linear_rejects_wrong_features():
    with pytest.raises(ValueError, match="6 features"):
        nn.Linear(6, 2)(Tensor.ones(2, 5))


@pytest.mark.parametrize("kw", [dict(), dict(stride=2), dict(padding=2), dict(dilation=2), dict(groups=3, stride=2),
                                dict(padding=(1, 2), stride=(2, 1)), dict(padding="same"), dict(bias=False)])
def test_conv2d(kw):
    ours = nn.Conv2d(6, 9, (3, 2), **kw)
    theirs = torch.nn.Conv2d(6, 9, (3, 2), **kw)
    check(ours, theirs, ["weight", "bias"], rand(2, 6, 9, 8), atol=1e-4)


@pytest.mark.parametrize("kw", [dict(), dict(stride=3, padding=1), dict(dilation=2, groups=2)])
def test_conv1d(kw):
    check(nn.Conv1d(4, 6, 3, **kw), torch.nn.Conv1d(4, 6, 3, **kw), ["weight", "bias"], rand(2, 4, 11), atol=1e-4)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, output_padding=1), dict(padding=1, dilation=2),
                                dict(groups=2, stride=2)])
def test_conv_transpose2d(kw):
    check(nn.ConvTranspose2d(4, 6, 3, **kw), torch.nn.ConvTranspose2d(4, 6, 3, **kw), ["weight", "bias"],
          rand(2, 4, 5, 6), atol=1e-4)


def test_conv_transpose1d():
    check(nn.ConvTranspose1d(3, 5, 4, stride=2, padding=1), torch.nn.ConvTranspose1d(3, 5, 4, stride=2, padding=1),
          ["weight", "bias"], rand(2, 3, 7), atol=1e-4)


def test_conv_rejects_bad_groups():
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(4, 6, 3, groups=4)


def test_default_initialisation_bounds():
    # PyTorch's kaiming_uniform(a=sqrt(5)) is U(+-1/sqrt(fan_in)), for the weight and for the bias
    Tensor.manual_seed(0)
    conv = nn.Conv2d(8, 16, 3)
    bound = 1 / math.sqrt(8 * 9)
    w, b = conv.weight.numpy(), conv.bias.numpy()
    assert w.shape == (16, 8, 3, 3) and np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert np.abs(b).max() <= bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.1 * bound  # the std of a uniform on [-bound, bound]
    lin = nn.Linear(50, 20)
    assert lin.weight.shape == (20, 50) and np.abs(lin.weight.numpy()).max() <= 1 / math.sqrt(50)
    convt = nn.ConvTranspose2d(4, 6, 3, groups=2)
    assert convt.weight.shape == (4, 3, 3, 3) and np.abs(convt.weight.numpy()).max() <= 1 / math.sqrt(27)
    emb = nn.Embedding(1000, 16).weight.numpy()
    assert abs(emb.std() - 1) < 0.05 and abs(emb.mean()) < 0.05  # N(0, 1)
    cell = nn.LSTMCell(3, 25)
    assert np.abs(cell.weight_hh.numpy()).max() <= 0.2 and cell.bias_ih is not None


@pytest.mark.parametrize("shape", [(5, 4), (3, 4, 7), (2, 4, 5, 3), (2, 4, 3, 2, 2)])
def test_batchnorm_train_matches_torch_and_updates_running_stats(shape, training):
    ours, theirs = nn.BatchNorm(4, momentum=0.2), torch.nn.BatchNorm2d(4, momentum=0.2)
    theirs.train()
    x_np = rand(*shape) * 3 + 1
    copy_params(ours, theirs, ["weight", "bias"])
    for step in range(2):
        x, xt = Tensor(x_np + step, requires_grad=True), torch.tensor(x_np + step, requires_grad=True)
        # the functional form takes any rank (BatchNorm2d checks for 4-d inputs); it updates the statistics alike
        ref = torch.nn.functional.batch_norm(xt, theirs.running_mean, theirs.running_var, theirs.weight,
                                             theirs.bias, True, 0.2, theirs.eps)
        out = ours(x)
        close(out, ref, 1e-4)
        out.square().sum().backward()
        ref.square().sum().backward()
        close(x.grad, xt.grad, 1e-3, 1e-3)
        Tensor.realize(ours.running_mean, ours.running_var, ours.num_batches_tracked)
    close(ours.weight.grad, theirs.weight.grad, 1e-3, 1e-3)
    close(ours.running_mean, theirs.running_mean, 1e-5)
    close(ours.running_var, theirs.running_var, 1e-4)
    assert ours.num_batches_tracked.numpy().tolist() == [2] and ours.num_batches_tracked.dtype == dtypes.int64


def test_batchnorm_eval_uses_running_stats():
    ours, theirs = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3).eval()
    theirs.running_mean.copy_(torch.tensor([0.5, -1.0, 2.0]))
    theirs.running_var.copy_(torch.tensor([2.0, 0.5, 1.5]))
    ours.running_mean, ours.running_var = from_torch(theirs.running_mean), from_torch(theirs.running_var)
    assert not Tensor.training
    check(ours, theirs, ["weight", "bias"], rand(2, 3, 4, 5), atol=1e-5)
    # no statistics move outside training
    close(ours.running_mean, theirs.running_mean)


def test_training_switch_by_context():
    bn = nn.BatchNorm(2)
    x = Tensor(rand(6, 2) * 5 + 3)
    eval_out = bn(x).numpy()
    with Context(TRAINING=1):
        assert nn.is_training()
        train_out = bn(x).numpy()
    assert not nn.is_training()
    assert abs(train_out.mean()) < 1e-5 and abs(eval_out.mean()) > 1  # batch statistics only while training
    assert np.abs(bn.running_mean.numpy()).max() > 0


def test_batchnorm_without_running_stats_or_affine(training):
    ours = nn.BatchNorm(3, affine=False, track_running_stats=False)
    theirs = torch.nn.BatchNorm1d(3, affine=False, track_running_stats=False)
    check(ours, theirs, [], rand(4, 3, 5))


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_groupnorm(groups):
    check(nn.GroupNorm(groups, 6), torch.nn.GroupNorm(groups, 6), ["weight", "bias"], rand(3, 6, 4, 5) * 2 + 1,
          atol=1e-4)


def test_instancenorm():
    check(nn.InstanceNorm(4), torch.nn.InstanceNorm2d(4, affine=True), ["weight", "bias"], rand(2, 4, 5, 3) + 2,
          atol=1e-4)


@pytest.mark.parametrize("normalized", [7, (3, 7)])
def test_layernorm(normalized):
    check(nn.LayerNorm(normalized), torch.nn.LayerNorm(normalized), ["weight", "bias"], rand(2, 3, 7) * 4 - 1,
          atol=1e-4)


def test_layernorm_rejects_wrong_shape():
    with pytest.raises(ValueError, match="LayerNorm"):
        nn.LayerNorm(5)(Tensor.ones(2, 4))


def test_layernorm2d():
    ours = nn.LayerNorm2d(3)
    theirs = torch.nn.LayerNorm(3)
    copy_params(ours, theirs, ["weight", "bias"])
    x_np = rand(2, 3, 4, 5)
    ref = theirs(torch.tensor(x_np).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
    close(ours(Tensor(x_np)), ref, 1e-5)


def test_rmsnorm():
    check(nn.RMSNorm(6, eps=1e-6), torch.nn.RMSNorm(6, eps=1e-6), ["weight"], rand(3, 2, 6), atol=1e-5)


def test_embedding():
    ours, theirs = nn.Embedding(11, 4), torch.nn.Embedding(11, 4)
    idx = np.array([[1, 10, 3], [3, 0, 3]], dtype=np.int64)
    copy_params(ours, theirs, ["weight"])
    out, ref = ours(Tensor(idx)), theirs(torch.tensor(idx))
    close(out, ref)
    out.sum().backward()
    ref.sum().backward()
    close(ours.weight.grad, theirs.weight.grad)  # repeated indices accumulate
    with pytest.raises(TypeError, match="integer indices"):
        ours(Tensor([1.0]))


@pytest.mark.parametrize("bias", [True, False])
def test_lstm_cell(bias):
    ours, theirs = nn.LSTMCell(5, 4, bias=bias), torch.nn.LSTMCell(5, 4, bias=bias)
    names = ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
    copy_params(ours, theirs, names)
    x_np, h_np, c_np = rand(3, 5), rand(3, 4, seed=1), rand(3, 4, seed=2)
    x, xt = Tensor(x_np, requires_grad=True), torch.tensor(x_np, requires_grad=True)
    h, c = ours(x, (Tensor(h_np), Tensor(c_np)))
    ht, ct = theirs(xt, (torch.tensor(h_np), torch.tensor(c_np)))
    close(h, ht)
    close(c, ct)
    (h.sum() + c.square().sum()).backward()
    (ht.sum() + ct.square().sum()).backward()
    close(x.grad, xt.grad, 1e-4)
    for n in names:
        if getattr(theirs, n) is not None:
            close(getattr(ours, n).grad, getattr(theirs, n).grad, 1e-4)
    h0, _ = ours(x)  # no state: zeros, as PyTorch
    close(h0, theirs(xt)[0])


def test_conv2d_with_three_spatial_dims_is_conv3d():
    check(nn.Conv2d(2, 3, (2, 3, 2), stride=(1, 2, 1), padding=1), torch.nn.Conv3d(2, 3, (2, 3, 2), stride=(1, 2, 1),
                                                                                 padding=1),
          ["weight", "bias"], rand(2, 2, 4, 5, 3), atol=1e-4)


def test_norms_without_affine():
    check(nn.GroupNorm(2, 4, affine=False), torch.nn.GroupNorm(2, 4, affine=False), [], rand(2, 4, 3) + 1)
    check(nn.LayerNorm(5, elementwise_affine=False), torch.nn.LayerNorm(5, elementwise_affine=False), [],
          rand(3, 5) * 2)
    check(nn.RMSNorm(5, eps=1e-5, elementwise_affine=False), torch.nn.RMSNorm(5, eps=1e-5, elementwise_affine=False),
          [], rand(3, 5))


def test_norms_reject_wrong_channels():
    with pytest.raises(ValueError, match="channels on axis 1"):
        nn.GroupNorm(2, 4)(Tensor.ones(2, 6, 3))
    with pytest.raises(ValueError, match="divisible by num_groups"):
        nn.GroupNorm(3, 4)
    with pytest.raises(ValueError, match="channels on axis 1"):
        nn.BatchNorm(4)(Tensor.ones(2, 3))
