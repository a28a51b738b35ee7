"""YOLOv8 object detection (Ultralytics' published architecture, sizes n/s/m/l/x) with the state-dict names of
Ultralytics' checkpoints (`model.0.conv.weight`, `model.2.cv1.conv.weight`, ..., `model.22.dfl.conv.weight`), so
that a checkpoint converted to safetensors loads as it is (see examples/yolov8.py for the conversion).

    model = YOLOv8.from_safetensors("yolov8n.safetensors")
    pred = model(images)            # (batch, 4 + classes, anchors): xywh boxes in input pixels, class scores
    dets = non_max_suppression(pred.numpy(), conf=0.25, iou=0.45)   # per image: (k, 6) x1 y1 x2 y2 score class

The network (backbone, neck, head and the box decoding) runs on the device; non_max_suppression runs on the host
with numpy, after the confidence filter has cut the candidates to a few hundred: greedy suppression is a short
data-dependent loop that gains nothing from a device.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np
from tinygrad import Tensor
from tinygrad.nn.layers import Conv2d
from tinygrad.nn.norm import BatchNorm2d

#: (depth multiple, width multiple, widest channel count) per size, as in Ultralytics' yolov8.yaml
SIZES: dict[str, tuple[float, float, int]] = {
    "n": (0.33, 0.25, 1024), "s": (0.33, 0.50, 1024), "m": (0.67, 0.75, 768), "l": (1.00, 1.00, 512),
    "x": (1.00, 1.25, 512)}
STRIDES = (8, 16, 32)
REG_MAX = 16  # bins of the distribution each box side is regressed as (distribution focal loss)


def _make_divisible(x: float, divisor: int = 8) -> int:
    return int(math.ceil(x / divisor) * divisor)


def scaled_channels(c: int, size: str) -> int:
    _, width, max_channels = SIZES[size]
    return _make_divisible(min(c, max_channels) * width)


def scaled_depth(n: int, size: str) -> int:
    return max(round(n * SIZES[size][0]), 1) if n > 1 else n


class Conv:
    """Convolution without bias, BatchNorm (eps 1e-3, Ultralytics' choice) and SiLU; 'same' padding for odd k."""

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1):
        self.conv = Conv2d(c1, c2, k, stride=s, padding=k // 2, bias=False)
        self.bn = BatchNorm2d(c2, eps=1e-3)

    def __call__(self, x: Tensor) -> Tensor:
        return self.bn(self.conv(x)).silu()


class Bottleneck:
    def __init__(self, c1: int, c2: int, shortcut: bool):
        self.cv1, self.cv2 = Conv(c1, c2, 3), Conv(c2, c2, 3)
        self.add = shortcut and c1 == c2

    def __call__(self, x: Tensor) -> Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f:
    """Split cv1's output in two halves, run n bottlenecks on the second one, each on the previous one's output,
    and fuse the two halves and every bottleneck output with cv2."""

    def __init__(self, c1: int, c2: int, n: int, shortcut: bool):
        self.c = c2 // 2
        self.cv1 = Conv(c1, 2 * self.c)
        self.cv2 = Conv((2 + n) * self.c, c2)
        self.m = [Bottleneck(self.c, self.c, shortcut) for _ in range(n)]

    def __call__(self, x: Tensor) -> Tensor:
        ys = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            ys.append(m(ys[-1]))
        return self.cv2(ys[0].cat(*ys[1:], dim=1))


class SPPF:
    """Three chained 5x5 max pools (receptive fields 5, 9, 13) concatenated with their input."""

    def __init__(self, c1: int, c2: int, k: int = 5):
        self.cv1, self.cv2, self.k = Conv(c1, c1 // 2), Conv(c1 // 2 * 4, c2), k

    def __call__(self, x: Tensor) -> Tensor:
        ys = [self.cv1(x)]
        for _ in range(3):
            pooled = ys[-1].max_pool2d(self.k, stride=1, padding=self.k // 2)
            assert isinstance(pooled, Tensor)
            ys.append(pooled)
        return self.cv2(ys[0].cat(*ys[1:], dim=1))


class DFL:
    """Expected value of a softmax over REG_MAX bins, as a 1x1 convolution with weights 0..REG_MAX-1 (a stored,
    untrained weight in the checkpoints: `model.22.dfl.conv.weight`)."""

    def __init__(self, c1: int = REG_MAX):
        self.conv = Conv2d(c1, 1, 1, bias=False)
        self.conv.weight = Tensor.arange(c1, dtype=self.conv.weight.dtype).reshape(1, c1, 1, 1).contiguous()
        self.conv.weight.requires_grad = False
        self.c1 = c1

    def __call__(self, x: Tensor) -> Tensor:  # (b, 4*c1, a) -> (b, 4, a)
        b, _, a = x.shape
        probs = x.reshape(b, 4, self.c1, a).transpose(2, 1).softmax(1)  # (b, c1, 4, a)
        return self.conv(probs).reshape(b, 4, a)


class Detect:
    """The decoupled head: per level a box branch (cv2: 4*REG_MAX distribution logits) and a class branch (cv3)."""

    def __init__(self, nc: int, ch: Sequence[int]):
        self.nc, self.nl, self.no = nc, len(ch), nc + 4 * REG_MAX
        c2, c3 = max(16, ch[0] // 4, REG_MAX * 4), max(ch[0], min(nc, 100))
        self.cv2: list[list[Conv | Conv2d]] = [[Conv(x, c2, 3), Conv(c2, c2, 3), Conv2d(c2, 4 * REG_MAX, 1)]
                                              for x in ch]
        self.cv3: list[list[Conv | Conv2d]] = [[Conv(x, c3, 3), Conv(c3, c3, 3), Conv2d(c3, nc, 1)] for x in ch]
        self.dfl = DFL(REG_MAX)

    def raw(self, xs: Sequence[Tensor]) -> list[Tensor]:
        """Per level (b, 4*REG_MAX + nc, h, w): box distribution logits, then class logits."""
        out = []
        for x, box, cls in zip(xs, self.cv2, self.cv3):
            b, c = x, x
            for layer in box:
                b = layer(b)
            for layer in cls:
                c = layer(c)
            out.append(b.cat(c, dim=1))
        return out

    def decode(self, raw: Sequence[Tensor]) -> Tensor:
        """(b, 4 + nc, anchors): boxes as centre x, centre y, width, height in input pixels, then class scores."""
        bs = raw[0].shape[0]
        anchors, strides = make_anchors([(r.shape[2], r.shape[3]) for r in raw], STRIDES[:len(raw)])
        x = raw[0].reshape(bs, self.no, -1).cat(*[r.reshape(bs, self.no, -1) for r in raw[1:]], dim=2)
        box, cls = x.split([4 * REG_MAX, self.nc], dim=1)
        dist = self.dfl(box)  # (b, 4, a): left, top, right, bottom distances from the anchor in stride units
        anc = Tensor(anchors)  # (2, a)
        lt, rb = dist[:, :2], dist[:, 2:]
        x1y1, x2y2 = anc - lt, anc + rb
        xywh = ((x1y1 + x2y2) / 2).cat(x2y2 - x1y1, dim=1) * Tensor(strides)
        return xywh.cat(cls.sigmoid(), dim=1)


def make_anchors(shapes: Sequence[tuple[int, int]], strides: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Cell centres of every level, row-major, in grid units ((2, anchors) x and y) and each anchor's stride
    ((1, anchors)); constants of the input size, so they are built on the host."""
    points, strides_out = [], []
    for (h, w), s in zip(shapes, strides):
        ys, xs = np.meshgrid(np.arange(h, dtype=np.float32) + 0.5, np.arange(w, dtype=np.float32) + 0.5,
                             indexing="ij")
        points.append(np.stack([xs.reshape(-1), ys.reshape(-1)]))
        strides_out.append(np.full((1, h * w), s, dtype=np.float32))
    return np.concatenate(points, axis=1), np.concatenate(strides_out, axis=1)


class YOLOv8:
    """Backbone (layers 0-9), PAN neck (10-21) and Detect head (22), numbered as Ultralytics' `model.N`."""

    def __init__(self, size: str = "n", num_classes: int = 80):
        if size not in SIZES:
            raise ValueError(f"unknown YOLOv8 size {size!r}; use one of {', '.join(SIZES)}")
        self.size, self.num_classes = size, num_classes
        ch, d = (lambda c: scaled_channels(c, size)), (lambda n: scaled_depth(n, size))
        c64, c128, c256, c512, c1024 = ch(64), ch(128), ch(256), ch(512), ch(1024)
        # layers without weights (upsample, concat) are None so that the indices match the checkpoint's names
        self.model: list[object] = [
            Conv(3, c64, 3, 2), Conv(c64, c128, 3, 2), C2f(c128, c128, d(3), True),
            Conv(c128, c256, 3, 2), C2f(c256, c256, d(6), True),  # 4: P3/8
            Conv(c256, c512, 3, 2), C2f(c512, c512, d(6), True),  # 6: P4/16
            Conv(c512, c1024, 3, 2), C2f(c1024, c1024, d(3), True), SPPF(c1024, c1024),  # 9: P5/32
            None, None, C2f(c1024 + c512, c512, d(3), False),  # 12
            None, None, C2f(c512 + c256, c256, d(3), False),  # 15: P3 out
            Conv(c256, c256, 3, 2), None, C2f(c256 + c512, c512, d(3), False),  # 18: P4 out
            Conv(c512, c512, 3, 2), None, C2f(c512 + c1024, c1024, d(3), False),  # 21: P5 out
            Detect(num_classes, (c256, c512, c1024)),
        ]

    def _layer(self, i: int) -> Conv:
        return self.model[i]  # type: ignore[return-value]  # every weighted layer is called the same way

    def features(self, x: Tensor) -> dict[int, Tensor]:
        """Every layer's output by its index (0-21), inputs (b, 3, h, w) with h and w multiples of 32."""
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"YOLOv8 takes images as (batch, 3, height, width), got shape {x.shape}")
        if x.shape[2] % 32 or x.shape[3] % 32:
            raise ValueError(f"image sides must be multiples of 32 (the deepest stride), got {x.shape[2:]}; "
                             f"letterbox-pad the image first")
        f: dict[int, Tensor] = {}
        for i in range(10):
            x = f[i] = self._layer(i)(x)
        f[10] = _upsample2(f[9])
        f[11] = f[10].cat(f[6], dim=1)
        f[12] = self._layer(12)(f[11])
        f[13] = _upsample2(f[12])
        f[14] = f[13].cat(f[4], dim=1)
        f[15] = self._layer(15)(f[14])
        f[16] = self._layer(16)(f[15])
        f[17] = f[16].cat(f[12], dim=1)
        f[18] = self._layer(18)(f[17])
        f[19] = self._layer(19)(f[18])
        f[20] = f[19].cat(f[9], dim=1)
        f[21] = self._layer(21)(f[20])
        return f

    @property
    def head(self) -> Detect:
        return self.model[22]  # type: ignore[return-value]

    def raw(self, x: Tensor) -> list[Tensor]:
        f = self.features(x)
        return self.head.raw([f[15], f[18], f[21]])

    def __call__(self, x: Tensor) -> Tensor:
        return self.head.decode(self.raw(x))

    @classmethod
    def from_state_dict(cls, state_dict: dict[str, Tensor], size: str | None = None) -> YOLOv8:
        """Build the model a state dict with Ultralytics' names describes (size and class count are read from the
        weights; a given `size` must agree) and load it."""
        from tinygrad.nn.state import load_state_dict

        try:
            width = state_dict["model.0.conv.weight"].shape[0]
            nc = state_dict["model.22.cv3.0.2.weight"].shape[0]
        except KeyError as e:
            raise ValueError(f"not a YOLOv8 detection checkpoint in Ultralytics' layout: no {e.args[0]} "
                             f"(expected names like model.0.conv.weight ... model.22.dfl.conv.weight)") from None
        depth = len({k.split(".")[3] for k in state_dict if k.startswith("model.2.m.")})
        found = [s for s in SIZES if scaled_channels(64, s) == width and scaled_depth(3, s) == depth]
        if not found:
            raise ValueError(f"the checkpoint's first layer has {width} channels and layer 2 {depth} bottlenecks, "
                             f"which match no YOLOv8 size ({', '.join(SIZES)})")
        if size is not None and size not in found:
            raise ValueError(f"--size {size} was asked for but the weights are YOLOv8{found[0]}")
        model = cls(found[0], nc)
        load_state_dict(model, state_dict, verbose=False)
        return model

    @classmethod
    def from_safetensors(cls, path: str | os.PathLike[str], size: str | None = None) -> YOLOv8:
        from tinygrad.nn.safetensors import safe_load

        return cls.from_state_dict(safe_load(os.fspath(path)), size)


def _upsample2(x: Tensor) -> Tensor:
    """Nearest-neighbour upsampling by 2 as a broadcast: every pixel repeated into a 2x2 block."""
    b, c, h, w = x.shape
    return x.reshape(b, c, h, 1, w, 1).expand(b, c, h, 2, w, 2).reshape(b, c, h * 2, w * 2)


def xywh2xyxy(b: np.ndarray) -> np.ndarray:
    out = np.empty_like(b)
    out[..., :2] = b[..., :2] - b[..., 2:] / 2
    out[..., 2:] = b[..., :2] + b[..., 2:] / 2
    return out


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> np.ndarray:
    """Greedy non-maximum suppression: indices of the kept boxes (x1 y1 x2 y2), best score first."""
    order = np.argsort(-scores, kind="stable")
    areas = (boxes[:, 2] - boxes[:, 0]).clip(0) * (boxes[:, 3] - boxes[:, 1]).clip(0)
    keep = []
    while order.size:
        i, rest = order[0], order[1:]
        keep.append(i)
        xx1, yy1 = np.maximum(boxes[i, 0], boxes[rest, 0]), np.maximum(boxes[i, 1], boxes[rest, 1])
        xx2, yy2 = np.minimum(boxes[i, 2], boxes[rest, 2]), np.minimum(boxes[i, 3], boxes[rest, 3])
        inter = (xx2 - xx1).clip(0) * (yy2 - yy1).clip(0)
        overlap = inter / np.maximum(areas[i] + areas[rest] - inter, 1e-9)
        order = rest[overlap <= iou]
    return np.asarray(keep, dtype=np.int64)


def non_max_suppression(pred: np.ndarray, conf: float = 0.25, iou: float = 0.45, max_det: int = 300,
                        max_candidates: int = 30000) -> list[np.ndarray]:
    """Per image of `pred` (b, 4 + nc, anchors): (k, 6) rows x1 y1 x2 y2 score class, best first. Each anchor
    keeps its best class; boxes of different classes never suppress each other."""
    if not 0 <= conf <= 1 or not 0 <= iou <= 1:
        raise ValueError(f"conf and iou are fractions in [0, 1], got conf={conf} iou={iou}")
    out = []
    for p in pred:
        p = p.T  # (anchors, 4 + nc)
        cls_scores = p[:, 4:]
        cls_id = cls_scores.argmax(1)
        score = cls_scores[np.arange(len(p)), cls_id]
        sel = score > conf
        boxes, score, cls_id = xywh2xyxy(p[sel, :4]), score[sel], cls_id[sel]
        if len(score) > max_candidates:
            top = np.argsort(-score, kind="stable")[:max_candidates]
            boxes, score, cls_id = boxes[top], score[top], cls_id[top]
        # shifting each class into its own region of the plane makes one NMS pass act per class
        offset = cls_id[:, None].astype(boxes.dtype) * (float(np.abs(boxes).max(initial=0.0)) * 2 + 1)
        keep = nms(boxes + offset, score, iou)[:max_det]
        out.append(np.concatenate([boxes[keep], score[keep, None], cls_id[keep, None].astype(boxes.dtype)], 1))
    return out
