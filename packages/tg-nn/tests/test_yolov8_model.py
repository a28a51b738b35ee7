"""YOLOv8 (tinygrad.nn.yolov8) against a torch reference of the published architecture written here layer by layer:
random weights at size n, exported as safetensors with Ultralytics' names, loaded through the example's loader;
every layer's feature map, the raw head, the decoded predictions and the detections after NMS must agree."""

from __future__ import annotations

import importlib.util
import math
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from tinygrad import Context, Tensor
from tinygrad.nn.yolov8 import SIZES, YOLOv8, non_max_suppression

torch = pytest.importorskip("torch")
tnn = torch.nn

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "yolov8.py"


# ---- the torch reference (this test's own code, following Ultralytics' yolov8.yaml) ----

def _ch(c: int, size: str) -> int:
    _, w, mx = SIZES[size]
    return int(math.ceil(min(c, mx) * w / 8) * 8)


def _depth(n: int, size: str) -> int:
    return max(round(n * SIZES[size][0]), 1) if n > 1 else n


class TConv(tnn.Module):
    def __init__(self, c1, c2, k=1, s=1):
        super().__init__()
        self.conv = tnn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = tnn.BatchNorm2d(c2, eps=1e-3)

    def forward(self, x):
        return tnn.functional.silu(self.bn(self.conv(x)))


class TBottleneck(tnn.Module):
    def __init__(self, c, shortcut):
        super().__init__()
        self.cv1, self.cv2, self.add = TConv(c, c, 3), TConv(c, c, 3), shortcut

    def forward(self, x):
        return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))


class TC2f(tnn.Module):
    def __init__(self, c1, c2, n, shortcut):
        super().__init__()
        c = c2 // 2
        self.cv1, self.cv2 = TConv(c1, 2 * c), TConv((2 + n) * c, c2)
        self.m = tnn.ModuleList(TBottleneck(c, shortcut) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class TSPPF(tnn.Module):
    def __init__(self, c1, c2):
        super().__init__()
        self.cv1, self.cv2 = TConv(c1, c1 // 2), TConv(c1 * 2, c2)
        self.m = tnn.MaxPool2d(5, 1, 2)

    def forward(self, x):
        a = self.cv1(x)
        b = self.m(a)
        c = self.m(b)
        return self.cv2(torch.cat([a, b, c, self.m(c)], 1))


class TDFL(tnn.Module):
    def __init__(self):
        super().__init__()
        self.conv = tnn.Conv2d(16, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = torch.arange(16, dtype=torch.float).view(1, 16, 1, 1)


class TDetect(tnn.Module):
    def __init__(self, nc, ch):
        super().__init__()
        c2, c3 = max(16, ch[0] // 4, 64), max(ch[0], min(nc, 100))
        self.nc = nc
        self.cv2 = tnn.ModuleList(tnn.Sequential(TConv(x, c2, 3), TConv(c2, c2, 3), tnn.Conv2d(c2, 64, 1)) for x in ch)
        self.cv3 = tnn.ModuleList(tnn.Sequential(TConv(x, c3, 3), TConv(c3, c3, 3), tnn.Conv2d(c3, nc, 1)) for x in ch)
        self.dfl = TDFL()

    def forward(self, xs):
        raw = [torch.cat([b(x), c(x)], 1) for x, b, c in zip(xs, self.cv2, self.cv3)]
        bs = raw[0].shape[0]
        anchors, strides = [], []
        for r, s in zip(raw, (8, 16, 32)):
            h, w = r.shape[2:]
            sy, sx = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
            anchors.append(torch.stack([sx, sy], -1).view(-1, 2))
            strides.append(torch.full((h * w, 1), float(s)))
        anc, st = torch.cat(anchors).T, torch.cat(strides).T
        x = torch.cat([r.view(bs, 64 + self.nc, -1) for r in raw], 2)
        box, cls = x.split([64, self.nc], 1)
        a = box.shape[-1]
        dist = self.dfl.conv(box.view(bs, 4, 16, a).transpose(2, 1).softmax(1)).view(bs, 4, a)
        lt, rb = dist.chunk(2, 1)
        x1y1, x2y2 = anc - lt, anc + rb
        return raw, torch.cat([torch.cat([(x1y1 + x2y2) / 2, x2y2 - x1y1], 1) * st, cls.sigmoid()], 1)


class TYOLOv8(tnn.Module):
    def __init__(self, size, nc):
        super().__init__()
        c = lambda n: _ch(n, size)  # noqa: E731
        d = lambda n: _depth(n, size)  # noqa: E731
        self.model = tnn.ModuleList([
            TConv(3, c(64), 3, 2), TConv(c(64), c(128), 3, 2), TC2f(c(128), c(128), d(3), True),
            TConv(c(128), c(256), 3, 2), TC2f(c(256), c(256), d(6), True),
            TConv(c(256), c(512), 3, 2), TC2f(c(512), c(512), d(6), True),
            TConv(c(512), c(1024), 3, 2), TC2f(c(1024), c(1024), d(3), True), TSPPF(c(1024), c(1024)),
            tnn.Upsample(scale_factor=2, mode="nearest"), tnn.Identity(), TC2f(c(1024) + c(512), c(512), d(3), False),
            tnn.Upsample(scale_factor=2, mode="nearest"), tnn.Identity(), TC2f(c(512) + c(256), c(256), d(3), False),
            TConv(c(256), c(256), 3, 2), tnn.Identity(), TC2f(c(256) + c(512), c(512), d(3), False),
            TConv(c(512), c(512), 3, 2), tnn.Identity(), TC2f(c(512) + c(1024), c(1024), d(3), False),
            TDetect(nc, (c(256), c(512), c(1024)))])
        # (layer, its inputs) after the backbone; -1 is the previous layer, a tuple is a concatenation
        self.route = {11: (-1, 6), 14: (-1, 4), 17: (-1, 12), 20: (-1, 9)}

    def forward(self, x):
        f = []
        for i, m in enumerate(self.model[:22]):
            if i in self.route:
                x = torch.cat([f[-1] if j == -1 else f[j] for j in self.route[i]], 1)
            else:
                x = m(x)
            f.append(x)
        raw, pred = self.model[22]([f[15], f[18], f[21]])
        return f, raw, pred


def _reference_nms(pred: np.ndarray, conf: float, iou: float) -> list[np.ndarray]:
    """Written independently of the module's: per class, greedy, by pairwise IoU matrix."""
    out = []
    for p in pred:
        p = p.T
        cls = p[:, 4:].argmax(1)
        score = p[:, 4:].max(1)
        m = score > conf
        xy, wh, score, cls = p[m, :2], p[m, 2:4], score[m], cls[m]
        boxes = np.concatenate([xy - wh / 2, xy + wh / 2], 1)
        rows = []
        for c in np.unique(cls):
            idx = np.where(cls == c)[0]
            idx = idx[np.argsort(-score[idx], kind="stable")]
            b = boxes[idx]
            lt = np.maximum(b[:, None, :2], b[None, :, :2])
            rb = np.minimum(b[:, None, 2:], b[None, :, 2:])
            inter = np.prod((rb - lt).clip(0), -1)
            area = np.prod(b[:, 2:] - b[:, :2], -1)
            ious = inter / (area[:, None] + area[None] - inter)
            alive = np.ones(len(idx), bool)
            for i in range(len(idx)):
                if alive[i]:
                    rows.append(np.concatenate([b[i], [score[idx[i]], c]]))
                    alive[i + 1:] &= ious[i, i + 1:] <= iou
        rows.sort(key=lambda r: -r[4])
        out.append(np.array(rows, dtype=np.float32).reshape(-1, 6))
    return out


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from safetensors.torch import save_file

    torch.manual_seed(0)
    ref = TYOLOv8("n", 80)
    with torch.no_grad():  # non-trivial BatchNorm statistics so that eval-mode folding is tested
        for mod in ref.modules():
            if isinstance(mod, tnn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
        # a larger class bias than random init gives a few confident boxes for NMS to work on
        for seq in ref.model[22].cv3:
            seq[2].bias.uniform_(-3.0, 1.0)
    ref.eval()
    path = tmp_path_factory.mktemp("yolov8") / "yolov8n.safetensors"
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    return ref, path


def test_layers_head_and_detections_match_reference(pair):
    ref, path = pair
    model = YOLOv8.from_safetensors(path, "n")
    assert model.size == "n" and model.num_classes == 80
    x = np.random.default_rng(1).random((1, 3, 64, 96), dtype=np.float32)
    with torch.no_grad():
        tf, traw, tpred = ref(torch.from_numpy(x))
    f = model.features(Tensor(x))
    raw = model.head.raw([f[15], f[18], f[21]])
    decoded = model.head.decode(raw)
    # one schedule for everything compared below. NOOPT: the ~100 distinct kernels compile about 8x faster
    # without the heuristics' upcasts, which the compiler's own tests cover
    with Context(NOOPT=1):
        Tensor.realize(*f.values(), *raw, decoded)
    for i in range(22):
        np.testing.assert_allclose(f[i].numpy(), tf[i].numpy(), rtol=1e-4, atol=1e-4, err_msg=f"layer {i}")
    for r, t in zip(raw, traw):
        np.testing.assert_allclose(r.numpy(), t.numpy(), rtol=1e-4, atol=1e-4)
    pred = decoded.numpy()
    np.testing.assert_allclose(pred, tpred.numpy(), rtol=1e-4, atol=1e-3)

    dets = non_max_suppression(pred, conf=0.3, iou=0.5)
    want = _reference_nms(tpred.numpy(), conf=0.3, iou=0.5)
    assert len(want[0]) > 1, "the fixture should give some detections to compare"
    assert dets[0].shape == want[0].shape
    np.testing.assert_allclose(dets[0], want[0], rtol=1e-4, atol=1e-3)


def test_loader_rejects_wrong_size_and_layout(pair, tmp_path):
    _, path = pair
    with pytest.raises(ValueError, match="YOLOv8n"):
        YOLOv8.from_safetensors(path, "s")
    from safetensors.numpy import save_file
    bad = tmp_path / "bad.safetensors"
    save_file({"backbone.weight": np.zeros(3, np.float32)}, str(bad))
    with pytest.raises(ValueError, match=r"model\.0\.conv\.weight"):
        YOLOv8.from_safetensors(bad)


def test_input_shape_errors():
    model = YOLOv8("n", 2)
    with pytest.raises(ValueError, match="multiples of 32"):
        model.features(Tensor.zeros(1, 3, 40, 64))


@pytest.mark.skipif(not EXAMPLE.exists(), reason="runs from the monorepo checkout (examples/ is not packaged)")
def test_example_runs_end_to_end(pair, tmp_path, capsys):
    _, path = pair
    spec = importlib.util.spec_from_file_location("yolov8_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    img = (np.random.default_rng(2).random((24, 32, 3)) * 255).astype(np.uint8)
    src = tmp_path / "in.png"
    example.write_png(src, img)
    np.testing.assert_array_equal(example.read_image(src), img)
    ppm = tmp_path / "in.ppm"
    ppm.write_bytes(b"P6\n32 24\n255\n" + img.tobytes())
    np.testing.assert_array_equal(example.read_image(ppm), img)
    out = tmp_path / "out.png"
    with Context(NOOPT=1):  # compile time, as above
        example.main(["--weights", str(path), "--image", str(src), "--out", str(out), "--conf", "0.3",
                      "--imgsz", "32"])
    lines = capsys.readouterr().out.splitlines()
    drawn = example.read_image(out)
    assert drawn.shape == img.shape
    assert lines, "the fixture's class biases should give detections at conf 0.3"
    assert (drawn != img).any(), "the boxes should be drawn onto the image"
    for line in lines:
        name, score, *box = line.split()
        assert name in example.COCO_NAMES and float(score) > 0.3 and len(box) == 4


def test_png_reader_undoes_every_row_filter(tmp_path):
    spec = importlib.util.spec_from_file_location("yolov8_example", EXAMPLE)
    if not EXAMPLE.exists() or spec is None or spec.loader is None:
        pytest.skip("runs from the monorepo checkout (examples/ is not packaged)")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (5, 4, 3), dtype=np.uint8)
    h, w, bpp = 5, 4, 3
    raw = img.reshape(h, w * bpp).astype(np.int32)
    rows = []
    for y in range(h):  # row y filtered with type y: none, sub, up, average, Paeth
        cur, prev = raw[y], raw[y - 1] if y else np.zeros(w * bpp, np.int32)
        left = np.concatenate([np.zeros(bpp, np.int32), cur[:-bpp]])
        upleft = np.concatenate([np.zeros(bpp, np.int32), prev[:-bpp]])
        if y == 4:
            p = left + prev - upleft
            pa, pb, pc = abs(p - left), abs(p - prev), abs(p - upleft)
            pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, upleft))
        else:
            pred = [np.zeros_like(cur), left, prev, (left + prev) // 2][y]
        rows.append(bytes([y]) + ((cur - pred) & 0xFF).astype(np.uint8).tobytes())

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))
    np.testing.assert_array_equal(example.read_png(png), img)
