"""torch.compile(model, backend="tinygrad") gives torch eager's results: forward, backward, optimizer steps, BatchNorm
running stats, odd shapes, strided inputs, new shapes, and a graph with an op the backend lacks (run by torch)."""
import copy
import importlib.metadata
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from tinygrad import GlobalCounters  # noqa: E402
from tinygrad.torch_compile import ATEN_OPS, TinygradFallbackWarning, core_aten_coverage  # noqa: E402
from tinygrad.torch_compile.backend import _warned  # noqa: E402

ATOL, RTOL = 1e-4, 1e-4


def close(a, b, atol=ATOL, rtol=RTOL):
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
    torch.testing.assert_close(a, b, atol=atol, rtol=rtol)


def compiled(model):
    torch._dynamo.reset()
    return torch.compile(model, backend="tinygrad")


@pytest.fixture(autouse=True)
def _seed_and_no_fallback(request):
    """Every test but the fallback's must run its graphs on tinygrad: a fallback warning fails it (the warnings are
    once per op, so the record of those given is cleared first)."""
    torch.manual_seed(0)
    _warned.clear()
    with warnings.catch_warnings():
        if "falls_back" not in request.node.name:
            warnings.simplefilter("error", TinygradFallbackWarning)
        yield
    torch._dynamo.reset()


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(13, 32), nn.Linear(32, 32), nn.Linear(32, 5)

    def forward(self, x):
        return self.l3(torch.tanh(self.l2(F.relu(self.l1(x)))))


class CNN(nn.Module):
    """An MNIST-style convnet: conv, BatchNorm, ReLU, max pooling, a linear head and log_softmax."""

    def __init__(self):
        super().__init__()
        self.c1, self.bn1 = nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8)
        self.c2, self.bn2 = nn.Conv2d(8, 12, 3, stride=1, padding=1, bias=False), nn.BatchNorm2d(12)
        self.head = nn.Linear(12 * 6 * 6, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.c1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.c2(x))), 2)
        return self.head(x.flatten(1)).log_softmax(-1)


class Block(nn.Module):
    """A pre-norm transformer block: causal attention through scaled_dot_product_attention, layer norm, GELU."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(a)
        return x + self.down(F.gelu(self.up(self.ln2(x))))


def test_the_backend_is_found_through_the_entry_point():
    names = [ep.name for ep in importlib.metadata.entry_points(group="torch_dynamo_backends")]
    assert "tinygrad" in names
    assert "tinygrad" in torch._dynamo.list_backends()


def test_mlp_forward_matches_eager():
    m = MLP()
    cm = compiled(m)
    GlobalCounters.reset()
    for batch in (4, 4, 4):  # the third call replays the captured jit
        x = torch.randn(batch, 13)
        with torch.no_grad():
            close(cm(x), m(x))
    assert GlobalCounters.kernel_count > 0  # tinygrad ran it


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_cnn_with_batchnorm(train):
    m = CNN().train(train)
    ref = copy.deepcopy(m)
    cm = compiled(m)
    for _ in range(3):
        x = torch.randn(6, 1, 28, 28)
        out, want = cm(x), ref(x)
        close(out, want)
        if train:
            out.sum().backward()
            want.sum().backward()
    # the running statistics are written back to the module's buffers, as eager's in-place update does
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        close(getattr(m.bn1, name), getattr(ref.bn1, name))
        close(getattr(m.bn2, name), getattr(ref.bn2, name))
    if train:
        for p, q in zip(m.parameters(), ref.parameters()):
            close(p.grad, q.grad, atol=1e-3)


def test_transformer_block_forward_and_backward():
    m = Block()
    ref = copy.deepcopy(m)
    cm = compiled(m)
    x = torch.randn(2, 7, 32, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    out, want = cm(x), ref(x2)
    close(out, want)
    g = torch.randn_like(want)
    out.backward(g)
    want.backward(g)
    close(x.grad, x2.grad)
    for p, q in zip(m.parameters(), ref.parameters()):
        close(p.grad, q.grad, atol=1e-3)


def test_training_steps_match_eager():
    model = CNN()
    ref = copy.deepcopy(model)
    cm = compiled(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    for _ in range(4):
        x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
        for m, o in ((cm, opt), (ref, ref_opt)):
            o.zero_grad()
            F.nll_loss(m(x), y).backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        close(p, q, atol=1e-3)


def test_a_whole_training_step_compiled():
    # the loss inside the compiled function: nll_loss and log_softmax's backward ops run here too
    model = MLP()
    ref = copy.deepcopy(model)

    def loss_fn(m, x, y):
        return F.cross_entropy(m(x), y)

    closs = compiled(loss_fn)
    opt, ref_opt = (torch.optim.Adam(p.parameters(), lr=1e-2) for p in (model, ref))
    for _ in range(3):
        x, y = torch.randn(16, 13), torch.randint(0, 5, (16,))
        for f, m, o in ((closs, model, opt), (loss_fn, ref, ref_opt)):
            o.zero_grad()
            loss = f(m, x, y)
            loss.backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        close(p, q, atol=1e-4)


def test_odd_shapes_and_strided_inputs():
    def f(a, b):
        return (a @ b).softmax(-1) * 3 - a.sum(1, keepdim=True)

    cf = compiled(f)
    a = torch.randn(7, 13)
    b = torch.randn(5, 13).t()  # a transposed view: strides (1, 13)
    close(cf(a, b), f(a, b))
    base = torch.randn(9, 26)
    a2 = base[1:8, ::2]  # a sliced, stepped view of a larger buffer
    assert not a2.is_contiguous()
    close(cf(a2, b), f(a2, b))
    one, row = torch.randn(1, 1), torch.randn(1, 3)
    close(cf(one, row), f(one, row))


def test_new_shapes_recompile_or_stay_right():
    m = MLP()
    cm = compiled(m)
    with torch.no_grad():
        for batch in (3, 5, 8, 5, 3, 1):
            x = torch.randn(batch, 13)
            close(cm(x), m(x))


def test_torch_semantics_division_promotion_reductions():
    def f(i, j, x):
        return (i // j, i / j, torch.div(i, j, rounding_mode="trunc"), i % j, i.sum(), (i > 2).sum(),
                x.mean(0), i * 0.5, i + x.to(torch.int32), torch.remainder(-i, 3))

    cf = compiled(f)
    i = torch.tensor([[-7, 7, 5], [9, -3, 2]], dtype=torch.int32)
    j = torch.tensor([2, -2, 3], dtype=torch.int32)
    x = torch.tensor([[1.5, -2.5, 3.0], [0.5, 0.25, -1.0]])
    for got, want in zip(cf(i, j, x), f(i, j, x)):
        close(got, want)


def test_input_mutation_is_written_back():
    def f(x, acc):
        acc.add_(x)
        x2 = x.clone()
        x2[:, 0] = -1.0
        return x2 * 2

    cf = compiled(f)
    x = torch.randn(3, 4)
    acc, acc_ref = torch.zeros(3, 4), torch.zeros(3, 4)
    for _ in range(3):
        close(cf(x, acc), f(x, acc_ref))
    close(acc, acc_ref)


def test_embedding_and_layer_norm_training():
    class Tok(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.ln, self.out = nn.Embedding(11, 16, padding_idx=0), nn.LayerNorm(16), nn.Linear(16, 11)

        def forward(self, t):
            return self.out(F.gelu(self.ln(self.emb(t)), approximate="tanh"))

    m = Tok()
    ref = copy.deepcopy(m)
    cm = compiled(m)
    t = torch.tensor([[1, 2, 0, 4], [4, 4, 10, 3]])
    out, want = cm(t), ref(t)
    close(out, want)
    out.square().sum().backward()
    want.square().sum().backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        close(p.grad, q.grad, atol=1e-3)


@torch.library.custom_op("tg_torch_compile_test::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_twice.register_fake
def _(x):
    return torch.empty_like(x)


def test_an_unsupported_op_falls_back_to_torch_with_a_warning():
    def f(x):
        return torch.ops.tg_torch_compile_test.twice(x.relu()) + 1

    cf = compiled(f)
    x = torch.randn(4, 5)
    with pytest.warns(TinygradFallbackWarning, match="tg_torch_compile_test.twice"):
        close(cf(x), f(x))
    # once per op: the next graph that uses it runs in torch without a second warning
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TinygradFallbackWarning)
        cf2 = torch.compile(lambda x: torch.ops.tg_torch_compile_test.twice(x) * 3, backend="tinygrad")
        close(cf2(x), x * 6)


def test_the_table_covers_most_of_core_aten():
    covered, missing = core_aten_coverage()
    assert len(covered) / (len(covered) + len(missing)) > 0.8, [str(m) for m in missing]
    assert torch.ops.aten.convolution_backward.default in ATEN_OPS


def _leaves(*xs):
    return [x.detach().clone().requires_grad_(x.is_floating_point()) for x in xs]


# (name, function, input shapes or tensors): each is run forward and backward through the backend and eagerly
OP_CASES = [
    ("overlapping max pool", lambda x: F.max_pool2d(x, 3, stride=1, padding=1), [(2, 3, 7, 9)]),
    ("max pool of ties", lambda x: F.max_pool2d(F.relu(x - 5), 2), [(2, 2, 6, 6)]),
    ("dilated max pool", lambda x: F.max_pool2d(x, 2, stride=2, dilation=2), [(1, 2, 9, 9)]),
    ("3-D max pool", lambda x: F.max_pool3d(x, 2, stride=(1, 2, 2), padding=1), [(1, 2, 5, 6, 4)]),
    ("1-D and 3-D avg pool, 1-D adaptive",
     lambda x, y: F.avg_pool1d(x, 3, 2).sum() + F.avg_pool3d(y, 2).sum() + F.adaptive_avg_pool1d(x, 4).sum(),
     [(2, 3, 11), (1, 2, 4, 6, 4)]),
    ("avg pool", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False), [(2, 3, 8, 7)]),
    ("adaptive avg pool", lambda x: F.adaptive_avg_pool2d(x, (2, 3)), [(2, 3, 8, 9)]),
    ("adaptive avg pool, uneven windows", lambda x: F.adaptive_avg_pool2d(x, (3, 4)), [(2, 3, 7, 9)]),
    ("nearest upsampling", lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), [(2, 3, 4, 5)]),
    ("bilinear resize", lambda x: F.interpolate(x, size=(7, 3), mode="bilinear"), [(2, 3, 4, 5)]),
    ("bilinear upsampling, align_corners",
     lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True), [(1, 2, 4, 6)]),
    ("strided grouped dilated conv", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=2, dilation=2, groups=2),
     [(2, 4, 11, 10), (6, 2, 3, 3), (6,)]),
    ("transposed conv", lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
     [(2, 3, 5, 4), (3, 4, 3, 3)]),
    ("conv1d", lambda x, w: F.conv1d(x, w, padding=1), [(2, 3, 10), (5, 3, 3)]),
    ("softmax and log_softmax", lambda x: x.softmax(1) * 2 + x.log_softmax(0), [(5, 7)]),
    ("weighted nll loss with ignore_index",
     lambda x, t: F.nll_loss(x.log_softmax(1), t, weight=torch.tensor([1.0, 2.0, 0.5, 3.0]), ignore_index=2),
     [(6, 4), torch.tensor([0, 2, 3, 1, 2, 3])]),
    ("cross entropy with label smoothing", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
     [(5, 6), torch.tensor([0, 5, 3, 1, 2])]),
    ("addmm alpha beta and bmm", lambda a, b, c, d: torch.addmm(a, b, c, beta=0.5, alpha=2) + torch.bmm(d, d).sum(),
     [(3, 5), (3, 4), (4, 5), (2, 3, 3)]),
    ("expand permute view", lambda x: x.unsqueeze(1).expand(3, 4, 5).permute(2, 0, 1).reshape(5, 12).cumsum(1),
     [(3, 5)]),
    ("where clamp amax var",
     lambda x: torch.where(x > 0, x, x * 0.1).clamp(-0.5, 1.5).amax(1) + x.var(0, unbiased=True), [(4, 4)]),
    ("group norm", lambda x, w, b: F.group_norm(x, 2, w, b), [(2, 4, 3, 3), (4,), (4,)]),
    ("diagonal", lambda x: torch.diagonal(x, 1, 0, 2) * 2, [(4, 3, 5)]),
    ("layer norm without affine", lambda x: F.layer_norm(x, (6,)) * x, [(3, 6)]),
    ("gelu exact, silu, sigmoid, leaky relu, hardtanh",
     lambda x: F.gelu(x) + F.silu(x) + x.sigmoid() + F.leaky_relu(x, 0.2) + F.hardtanh(x), [(4, 9)]),
    ("attention with a float mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     [(2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 4), (5, 6)]),
    ("stack cat slice", lambda x, y: torch.stack([torch.cat([x[:, 1:4], y], 1), torch.cat([y, x[:, ::2]], 1)]),
     [(3, 6), (3, 3)]),
]


@pytest.mark.parametrize("name,fn,shapes", OP_CASES, ids=[c[0] for c in OP_CASES])
def test_ops_forward_and_backward(name, fn, shapes):
    inputs = [s if isinstance(s, torch.Tensor) else torch.randn(*s) for s in shapes]
    a, b = _leaves(*inputs), _leaves(*inputs)
    cf = compiled(fn)
    out, want = cf(*a), fn(*b)
    close(out, want)
    g = torch.randn_like(want)
    (out * g).sum().backward()
    (want * g).sum().backward()
    for x, y in zip(a, b):
        if y.grad is not None:
            close(x.grad, y.grad, atol=1e-3)


def test_torch_inputs_are_shared_not_copied():
    from tinygrad import Device
    from tinygrad.torch_compile.backend import to_tinygrad
    if Device.DEFAULT != "CPU":
        pytest.skip(f"the default device {Device.DEFAULT} keeps its own memory: inputs are copied there")
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    tt = to_tinygrad(t)
    t[0, 0] = 42.0  # a write on the torch side is seen: one memory
    assert tt.tolist()[0][0] == 42.0


def _ints(*shape, lo=-9, hi=10):
    return torch.randint(lo, hi, shape, dtype=torch.int64)


def _set_columns(x, i, j):
    y = x.clone()
    y[:, i, j] = 5.0  # an index_put on dims 1 and 2, after a full slice
    return y


# forward only: (name, function, inputs) over the rest of the table; ints and bools where the op is about them
FORWARD_CASES = [
    ("roll repeat flip", lambda x: torch.roll(x, (1, -2), (0, 1)).repeat(2, 1).flip(1), [torch.randn(3, 5)]),
    ("topk and sort", lambda x: (torch.topk(x, 3, dim=1), torch.sort(x, dim=0, descending=True)),
     [torch.randn(4, 6)]),
    ("gather scatter_add index_select",
     lambda x, i: (x.gather(1, i), torch.zeros(4, 6).scatter_add(1, i, x[:, :3]), x.index_select(1, i[0])),
     [torch.randn(4, 6), _ints(4, 3, lo=0, hi=6)]),
    ("index_put, accumulated and not",
     lambda x, i, j, v: (x.index_put((i,), v, accumulate=True), _set_columns(x, i, j),
                         x.index_put((i, j), v[0, 0], accumulate=True)),
     [torch.randn(3, 4, 5), _ints(6, lo=0, hi=3), _ints(6, lo=0, hi=4), torch.randn(6, 4, 5)]),
    ("cumsum tril triu", lambda x: x.cumsum(0).tril(1) + x.triu(-1), [torch.randn(5, 5)]),
    ("reflect and replicate pads, negative constant pad",
     lambda x: (F.pad(x, (2, 1, 1, 2), mode="reflect"), F.pad(x, (1, 1, 2, 0), mode="replicate"),
                F.pad(x, (-1, 2, 1, -2), value=3.0)), [torch.randn(2, 3, 5, 6)]),
    ("argmax argmin max min prod logsumexp", lambda x: (x.argmax(1), x.argmin(), x.max(0), x.min(1, keepdim=True),
                                                        x.prod(1), x.logsumexp(1)), [torch.randn(4, 5)]),
    ("any all isnan isinf", lambda x: ((x > 0).any(1), (x > -5).all(), x.isnan(), (x / 0).isinf()),
     [torch.randn(3, 4)]),
    ("rounding", lambda x: (x.floor(), x.ceil(), x.round(), x.trunc(), torch.round(x * 0 + 2.5)),
     [torch.randn(6) * 3]),
    ("pow atan2 fmod remainder", lambda x, y: (x.abs() ** y, torch.atan2(x, y), torch.fmod(x, y), x % y),
     [torch.randn(7), torch.randn(7).abs() + 0.5]),
    ("integer arithmetic", lambda i, j: (i & j, i | j, i ^ j, ~i, i * j - 3, -i, i.abs(), torch.maximum(i, j),
                                         i.sum(0), i.float().mean()), [_ints(3, 4), _ints(3, 4)]),
    ("logic", lambda a, b: (a & b, a | b, a ^ b, ~a, torch.logical_and(a, b), torch.logical_not(a).sum()),
     [torch.rand(4, 3) > 0.5, torch.rand(4, 3) > 0.5]),
    ("transcendental", lambda x: (x.exp(), x.abs().log(), x.sin(), x.cos(), x.tanh(), torch.erf(x), x.expm1(),
                                  x.abs().log1p(), x.abs().sqrt(), x.abs().rsqrt(), x.sigmoid(), x.reciprocal()),
     [torch.randn(8) + 0.1]),
    ("var std mean", lambda x: (x.var(1, correction=0), x.std(0), torch.var_mean(x, 1)), [torch.randn(5, 6)]),
    ("float16 and float64", lambda h, d: (h * 2 + 1, h.float().sum(), d.exp() * 3, (d + h.double()).mean()),
     [torch.randn(4, 3).half(), torch.randn(4, 3, dtype=torch.float64)]),
    ("arange full zeros ones", lambda x: (torch.arange(2, 11, 3) * x[0], torch.full((2, 3), 7) + 0.5,
                                          torch.zeros_like(x) + torch.ones(3)), [torch.randn(4, 3)]),
    ("as_strided windows", lambda x: torch.as_strided(x, (3, 4), (2, 1), 1) * 2, [torch.randn(10)]),
    ("conv3d", lambda x, w: F.conv3d(x, w, padding=1), [torch.randn(1, 2, 4, 5, 3), torch.randn(3, 2, 3, 3, 3)]),
]


def _flat(x):
    if isinstance(x, (tuple, list)):
        return [y for z in x for y in _flat(z)]
    return [x]


@pytest.mark.parametrize("name,fn,inputs", FORWARD_CASES, ids=[c[0] for c in FORWARD_CASES])
def test_ops_forward(name, fn, inputs):
    cf = compiled(fn)
    for _ in range(3):  # eager, captured, replayed
        for got, want in zip(_flat(cf(*inputs)), _flat(fn(*inputs)), strict=True):
            close(got, want, atol=1e-3 if got.dtype == torch.float16 else ATOL)
