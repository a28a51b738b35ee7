"""examples/yolov8.py: YOLOv8-n's layout (depth 0.33, width 0.25, ratio 2.0) with 8 classes on a 128x128 image:
the example's preprocess (letterbox, BGR->RGB, /255), the model (Darknet, FPN neck, detection head with DFL and
anchors) and its in-model postprocess (top-300 boxes, IoU matrix, class-aware suppression), then scale_boxes.
Outputs: the head's raw predictions, and the kept boxes in a canonical order (the top-k order of equal scores is
not specified)."""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.getcwd())  # the workspace's examples/ package, ahead of the runner's examples.py on the path
import standins  # noqa: F401  (tinygrad internals' stand-ins, before any example import)
from _lm_common import numpy_weights, save, stub_module

RTOL = 1e-3
ATOL = 1e-3


def copy_make_border(image, top, bottom, left, right, border_type, value=(0, 0, 0)):
    """cv2.copyMakeBorder with BORDER_CONSTANT, in numpy (the example letterboxes every image with it)."""
    out = np.empty((image.shape[0] + top + bottom, image.shape[1] + left + right, image.shape[2]), image.dtype)
    out[:] = np.asarray(value, dtype=image.dtype)
    out[top:top + image.shape[0], left:left + image.shape[1]] = image
    return out


stub_module("cv2", copyMakeBorder=copy_make_border, BORDER_CONSTANT=0, INTER_LINEAR=1)


def canonical(boxes: np.ndarray) -> np.ndarray:
    """The kept boxes (score > 0), sorted by score, then class, then coordinates."""
    kept = boxes[boxes[:, 4] > 0]
    return kept[np.lexsort((kept[:, 3], kept[:, 2], kept[:, 1], kept[:, 0], kept[:, 5], -kept[:, 4]))]


def main(out: str) -> None:
    from tinygrad.nn.state import load_state_dict

    import examples.yolov8 as yolo
    depth, width, ratio = yolo.get_variant_multiples("n")
    model = yolo.YOLOv8(w=width, r=ratio, d=depth, num_classes=8)
    weights = {k: v for k, v in numpy_weights(model, seed=17).items() if k != "head.dfl.conv.weight"}  # arange(16)
    load_state_dict(model, weights, strict=False, verbose=False)

    image = np.random.default_rng(18).integers(0, 256, size=(128, 128, 3), dtype=np.uint8)
    x = yolo.preprocess([image], imgsz=128)
    raw = model.head(model.fpn(*model.net(x))).numpy()

    def detect():
        predictions = model(x).numpy()
        return yolo.scale_boxes(x.shape[2:], predictions, image.shape)

    detect()
    t0 = time.perf_counter()
    boxes = detect()
    seconds = time.perf_counter() - t0
    save(out, seconds, raw=raw, boxes=canonical(boxes))


if __name__ == "__main__":
    main(sys.argv[1])
