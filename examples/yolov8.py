"""Object detection with YOLOv8 (Ultralytics' detection models n/s/m/l/x): boxes drawn onto a PNG, one line per
detection on stdout.

    python examples/yolov8.py --weights yolov8n.safetensors --image street.png --out boxes.png
    python examples/yolov8.py --size s --random --image street.png       # random weights: a speed check

Weights are Ultralytics' state dict saved as safetensors; convert a published checkpoint once, where the
`ultralytics` package is installed (its pickle needs it); one line, wrapped here:

    python -c "import torch, safetensors.torch as st; m = torch.load('yolov8n.pt', weights_only=False)['model']; \
st.save_file({k: v.float().contiguous() for k, v in m.state_dict().items()}, 'yolov8n.safetensors')"

Images are read as PNG (8-bit gray, RGB, RGBA or palette, not interlaced) or binary PPM with the standard library;
other formats need Pillow. The image is resized so that its longer side is --imgsz, padded to multiples of 32
(grey, as Ultralytics does), run through the network on the device (backbone, neck, head and the box decoding
under TinyJit), and the detections are filtered by --conf and suppressed by --iou with numpy on the host
(see tinygrad.nn.yolov8).
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tinygrad import Tensor, TinyJit
from tinygrad.nn.yolov8 import SIZES, YOLOv8, non_max_suppression

COCO_NAMES = (
    "person bicycle car motorcycle airplane bus train truck boat traffic_light fire_hydrant stop_sign parking_meter "
    "bench bird cat dog horse sheep cow elephant bear zebra giraffe backpack umbrella handbag tie suitcase frisbee "
    "skis snowboard sports_ball kite baseball_bat baseball_glove skateboard surfboard tennis_racket bottle "
    "wine_glass cup fork knife spoon bowl banana apple sandwich orange broccoli carrot hot_dog pizza donut cake "
    "chair couch potted_plant bed dining_table toilet tv laptop mouse remote keyboard cell_phone microwave oven "
    "toaster sink refrigerator book clock vase scissors teddy_bear hair_drier toothbrush").split()


# ---- images without Pillow ----

def _unfilter(raw: bytes, h: int, stride: int, bpp: int) -> np.ndarray:
    """Undo PNG's per-row filters (none, sub, up, average, Paeth)."""
    out = np.zeros((h, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int32)
    pos = 0
    for y in range(h):
        ftype, line = raw[pos], np.frombuffer(raw, np.uint8, stride, pos + 1).astype(np.int32)
        pos += stride + 1
        if ftype == 0:
            cur = line
        elif ftype == 2:
            cur = (line + prev) & 0xFF
        elif ftype in (1, 3, 4):  # these depend on the pixel to the left: a loop over the row
            cur = line.copy()
            for x in range(stride):
                a = cur[x - bpp] if x >= bpp else 0
                c = prev[x - bpp] if x >= bpp else 0
                b = prev[x]
                if ftype == 1:
                    pred = a
                elif ftype == 3:
                    pred = (a + b) >> 1
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[x] = (cur[x] + pred) & 0xFF
        else:
            raise ValueError(f"corrupt PNG: unknown row filter {ftype}")
        out[y], prev = cur, cur
    return out


def read_png(data: bytes) -> np.ndarray:
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat, palette, hdr = 8, [], None, None
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"PLTE":
            palette = np.frombuffer(body, np.uint8).reshape(-1, 3)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if hdr is None:
        raise ValueError("corrupt PNG: no IHDR chunk")
    w, h, depth, ctype, _, _, interlace = hdr
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(ctype)
    if depth != 8 or interlace or channels is None:
        raise ValueError(f"this reader takes 8-bit non-interlaced PNGs (got bit depth {depth}, colour type {ctype}, "
                         f"interlace {interlace}); install Pillow or convert the image")
    px = _unfilter(zlib.decompress(b"".join(idat)), h, w * channels, channels).reshape(h, w, channels)
    if ctype == 3:
        if palette is None:
            raise ValueError("corrupt PNG: palette image without a PLTE chunk")
        return palette[px[..., 0]]
    if channels in (1, 2):
        return np.repeat(px[..., :1], 3, axis=2)
    return px[..., :3].copy()


def read_ppm(data: bytes) -> np.ndarray:
    fields: list[int] = []
    pos = 2
    while len(fields) < 3:  # width, height, maxval, separated by whitespace and # comments
        while data[pos:pos + 1].isspace():
            pos += 1
        if data[pos:pos + 1] == b"#":
            pos = data.index(b"\n", pos) + 1
            continue
        end = pos
        while not data[end:end + 1].isspace():
            end += 1
        fields.append(int(data[pos:end]))
        pos = end
    w, h, maxval = fields
    if maxval != 255:
        raise ValueError(f"this reader takes 8-bit PPMs (maxval 255, got {maxval})")
    return np.frombuffer(data, np.uint8, w * h * 3, pos + 1).reshape(h, w, 3).copy()


def read_image(path: str | os.PathLike[str]) -> np.ndarray:
    """(h, w, 3) uint8 RGB."""
    data = Path(path).read_bytes()
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return read_png(data)
    if data[:2] == b"P6":
        return read_ppm(data)
    try:
        from PIL import Image
    except ImportError:
        raise ValueError(f"{path}: not a PNG or binary PPM, and Pillow (which reads other formats) is not "
                         f"installed: convert the image to PNG or `pip install pillow`") from None
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def write_png(path: str | os.PathLike[str], img: np.ndarray) -> None:
    """An RGB PNG, written to a temporary file and renamed over `path`."""
    h, w, _ = img.shape
    rows = np.concatenate([np.zeros((h, 1), np.uint8), img.reshape(h, w * 3)], axis=1)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + chunk(b"IEND", b""))
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent or ".", prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(png)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


# ---- pre- and post-processing ----

PALETTE = np.array([(255, 56, 56), (255, 157, 151), (255, 112, 31), (255, 178, 29), (207, 210, 49), (72, 249, 10),
                    (146, 204, 23), (61, 219, 134), (26, 147, 52), (0, 212, 187), (44, 153, 168), (0, 194, 255),
                    (52, 69, 147), (100, 115, 255), (0, 24, 236), (132, 56, 255), (82, 0, 133), (203, 56, 255),
                    (255, 149, 200), (255, 55, 199)], dtype=np.uint8)


def resize_bilinear(img: np.ndarray, h: int, w: int) -> np.ndarray:
    ih, iw = img.shape[:2]
    ys = np.clip((np.arange(h) + 0.5) * ih / h - 0.5, 0, ih - 1)
    xs = np.clip((np.arange(w) + 0.5) * iw / w - 0.5, 0, iw - 1)
    y0, x0 = ys.astype(int), xs.astype(int)
    y1, x1 = np.minimum(y0 + 1, ih - 1), np.minimum(x0 + 1, iw - 1)
    fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    f = img.astype(np.float32)
    top = f[y0][:, x0] * (1 - fx) + f[y0][:, x1] * fx
    bot = f[y1][:, x0] * (1 - fx) + f[y1][:, x1] * fx
    return top * (1 - fy) + bot * fy


def letterbox(img: np.ndarray, size: int) -> tuple[np.ndarray, float, tuple[int, int]]:
    """(1, 3, H, W) float input in [0, 1] with H and W multiples of 32, the scale and the (x, y) padding."""
    h, w = img.shape[:2]
    scale = size / max(h, w)
    nh, nw = max(round(h * scale), 1), max(round(w * scale), 1)
    ph, pw = -(-nh // 32) * 32, -(-nw // 32) * 32
    top, left = (ph - nh) // 2, (pw - nw) // 2
    canvas = np.full((ph, pw, 3), 114, np.float32)
    canvas[top:top + nh, left:left + nw] = resize_bilinear(img, nh, nw)
    return (canvas / 255).transpose(2, 0, 1)[None].copy(), scale, (left, top)


def draw_boxes(img: np.ndarray, dets: np.ndarray, thickness: int = 2) -> np.ndarray:
    out = img.copy()
    h, w = out.shape[:2]
    for x1, y1, x2, y2, _, cls in dets:
        color = PALETTE[int(cls) % len(PALETTE)]
        a, b = int(np.clip(x1, 0, w - 1)), int(np.clip(x2, 0, w - 1))
        c, d = int(np.clip(y1, 0, h - 1)), int(np.clip(y2, 0, h - 1))
        out[c:c + thickness, a:b + 1] = color
        out[max(d - thickness + 1, 0):d + 1, a:b + 1] = color
        out[c:d + 1, a:a + thickness] = color
        out[c:d + 1, max(b - thickness + 1, 0):b + 1] = color
    return out


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--weights", help="Ultralytics' YOLOv8 state dict as safetensors (see the module docstring)")
    p.add_argument("--random", action="store_true", help="random weights instead of --weights (timing only)")
    p.add_argument("--size", choices=list(SIZES), default=None,
                   help="model size; with --weights it is read from the weights and this only checks it")
    p.add_argument("--image", required=True, help="a PNG or PPM image (other formats with Pillow)")
    p.add_argument("--out", default="yolov8_out.png", help="where to write the image with the boxes (PNG)")
    p.add_argument("--conf", type=float, default=0.25, help="lowest class score kept")
    p.add_argument("--iou", type=float, default=0.45, help="overlap above which the weaker box is suppressed")
    p.add_argument("--imgsz", type=int, default=640, help="the network input's longer side")
    p.add_argument("--runs", type=int, default=1, help="run the network this many times and report images/s")
    args = p.parse_args(argv)
    if (args.weights is None) == (not args.random):
        p.error("give --weights PATH, or --random for random weights")
    if args.imgsz < 32:
        p.error("--imgsz must be at least 32")

    try:
        img = read_image(args.image)
        model = YOLOv8(args.size or "n") if args.random else YOLOv8.from_safetensors(args.weights, args.size)
    except (OSError, ValueError) as e:
        sys.exit(str(e))
    x, scale, (padx, pady) = letterbox(img, args.imgsz)

    run = TinyJit(lambda t: model(t).realize())
    inp = Tensor(x).realize()
    pred = run(inp).numpy()
    start = time.perf_counter()
    for _ in range(args.runs):
        pred = run(inp).numpy()
    elapsed = time.perf_counter() - start
    try:
        dets = non_max_suppression(pred, conf=args.conf, iou=args.iou)[0]
    except ValueError as e:
        sys.exit(str(e))
    dets[:, [0, 2]] = (dets[:, [0, 2]] - padx) / scale
    dets[:, [1, 3]] = (dets[:, [1, 3]] - pady) / scale
    # boxes may reach into the padding or past the border: keep them on the image
    dets[:, [0, 2]] = dets[:, [0, 2]].clip(0, img.shape[1])
    dets[:, [1, 3]] = dets[:, [1, 3]].clip(0, img.shape[0])
    names = COCO_NAMES if model.num_classes == len(COCO_NAMES) else None
    for x1, y1, x2, y2, score, cls in dets:
        name = names[int(cls)] if names else f"class{int(cls)}"
        print(f"{name} {score:.2f} {x1:.0f} {y1:.0f} {x2:.0f} {y2:.0f}")
    write_png(args.out, draw_boxes(img, dets))
    print(f"YOLOv8{model.size} at {x.shape[3]}x{x.shape[2]}: {len(dets)} detections, "
          f"{args.runs / max(elapsed, 1e-9):.2f} images/s; wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
