#!/usr/bin/env bash
# The CUDA backend on a real GPU (written for an H200; any NVIDIA GPU of sm_80 or newer works), in about 8 minutes:
#
#   1. a fresh venv with the framework packages, tg-backend-cuda[runtime,test] (pycuda builds here) and PyTorch
#   2. the conformance kit on DEV=CUDA
#   3. the CUDA backend's own tests (the GPU ones run here) and the Tensor op table on DEV=CUDA
#   4. beautiful_mnist on DEV=CUDA (Fashion-MNIST, 70 steps)
#   5. a small benchmark against PyTorch on the same GPU: matmul 4096/8192 in float16, bfloat16, float32, and a
#      fused elementwise a*b+c; prints times and ratios (ours / PyTorch), asserts nothing about speed
#
#   bash integration-tests/gpu/run_h200.sh        # from anywhere in the checkout
#
# Needs: an NVIDIA driver with a GPU (nvidia-smi), a CUDA 12 toolkit to build pycuda (cuda.h: CUDA_HOME, or nvcc on
# PATH, or /usr/local/cuda), g++ and the Python 3.11 headers, and a package index that pip can reach (a PyPI mirror:
# configure it the way pip reads it, PIP_INDEX_URL / PIP_FIND_LINKS / pip.conf). Fashion-MNIST from Debian's
# dataset-fashion-mnist (/usr/share/datasets/fashion-mnist) or FASHION_MNIST_DIR.
# Environment: VENV (default $TMPDIR/tg-cuda-venv), OUT (results: the kit's JSON report, the compile cache; default
# $TMPDIR/tg-cuda-results), PYTHON (python3.11), WORKERS (pytest workers, 8).
# Exits non-zero if there is no GPU, if an install fails, or if any stage fails; the summary at the end says which.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
die() { echo "run_h200: FAILED: $*" >&2; exit 1; }
section() { echo; echo "=== $* ==="; }

section "GPU"
command -v nvidia-smi >/dev/null 2>&1 || die "no nvidia-smi: this machine has no NVIDIA driver (and so no usable GPU)"
nvidia-smi -L 2>&1 | grep -q "^GPU " || die "nvidia-smi lists no GPU: $(nvidia-smi -L 2>&1 | head -3)"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv

CUDA_HOME="${CUDA_HOME:-${CUDA_PATH:-}}"
if [ -z "$CUDA_HOME" ] && command -v nvcc >/dev/null 2>&1; then CUDA_HOME="$(dirname "$(dirname "$(command -v nvcc)")")"; fi
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
[ -f "$CUDA_HOME/include/cuda.h" ] || die "no CUDA toolkit at $CUDA_HOME (no include/cuda.h): pycuda builds against one; set CUDA_HOME"
export CUDA_ROOT="$CUDA_HOME" PATH="$CUDA_HOME/bin:$PATH"

section "venv and installs"
VENV="${VENV:-${TMPDIR:-/tmp}/tg-cuda-venv}"
PYTHON="${PYTHON:-python3.11}"
WORKERS="${WORKERS:-8}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV" || die "cannot make a venv with $PYTHON"
PY="$VENV/bin/python"
"$PY" -m pip install -q --disable-pip-version-check \
  -e packages/tg-core -e packages/tg-compiler -e packages/tg-backend-cpu -e packages/tg-nn \
  -e "packages/tg-backend-cuda[runtime,test]" \
  hypothesis==6.170.17 safetensors==0.8.0 || die "installing the packages failed (pycuda's build needs the toolkit, g++ and Python.h)"
# PyPI's Linux wheel of torch is the CUDA build (the CPU-only one is torch==2.13.0+cpu from PyTorch's own index)
"$PY" -m pip install -q --disable-pip-version-check torch==2.13.0 || die "installing torch==2.13.0 failed"
"$PY" -m tinygrad.device
"$PY" - <<'PY' || die "CUDA is not usable from tinygrad or from PyTorch (see above)"
import sys, torch
from tinygrad import Device
reason = Device.availability("CUDA")
if reason is not None:
    sys.exit(f"tinygrad's CUDA backend is unavailable: {reason}")
if not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} sees no GPU (is this the CUDA build? torch.version.cuda={torch.version.cuda})")
dev = Device["CUDA"]
print(f"tinygrad CUDA: {dev.renderer.arch}, {dev.compiler.cache_key}; torch {torch.__version__} on "
      f"{torch.cuda.get_device_name(0)}")
PY

FAILED=()
stage() {  # stage NAME COMMAND...: run it, remember a failure, go on
  local name="$1"; shift
  section "$name"
  local start=$SECONDS
  if "$@"; then echo "--- $name: passed ($((SECONDS - start)) s)"; else echo "--- $name: FAILED ($((SECONDS - start)) s)"; FAILED+=("$name"); fi
}
OUT="${OUT:-${TMPDIR:-/tmp}/tg-cuda-results}"
mkdir -p "$OUT"
export TINYGRAD_CACHE_DIR="$OUT/cache"

stage "conformance kit on CUDA" "$PY" -m pytest -p no:cacheprovider -q -n "$WORKERS" --pyargs tinygrad.conformance \
  --tg-device=CUDA --tg-report="$OUT/conformance-cuda.json"
stage "tg-backend-cuda tests" "$PY" -m pytest -p no:cacheprovider -q -n "$WORKERS" packages/tg-backend-cuda/tests
stage "op table on CUDA" env DEV=CUDA TG_EXPECT_DEVICE=CUDA "$PY" -m pytest -p no:cacheprovider -q -n "$WORKERS" \
  packages/tg-core/tests/test_ops.py

mnist() {
  if [ -z "${FASHION_MNIST_DIR:-}" ] && [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    echo "no Fashion-MNIST: install Debian's dataset-fashion-mnist or set FASHION_MNIST_DIR"; return 1
  fi
  DEV=CUDA FASHION=1 STEPS=70 TARGET_EVAL_ACC_PCT=80 "$PY" examples/beautiful_mnist.py
}
stage "beautiful_mnist on CUDA" mnist

bench() {
  "$PY" - <<'PY'
"""Medians of a few timed runs after a warm-up (compile), each on fresh inputs made outside the timed region."""
import statistics, time
import torch
from tinygrad import Device, Tensor, dtypes

dev = Device["CUDA"]
ROUNDS = 5


def ours(make, run):
    times = []
    for i in range(ROUNDS + 1):
        args = [t.realize() for t in make()]
        dev.synchronize()
        st = time.perf_counter()
        run(*args).realize()
        dev.synchronize()
        if i:  # the first one compiles
            times.append(time.perf_counter() - st)
    return statistics.median(times)


def theirs(make, run):
    times = []
    for i in range(ROUNDS + 1):
        args = make()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run(*args)
        end.record()
        torch.cuda.synchronize()
        if i:
            times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


print(f"{'workload':<34} {'ours':>12} {'PyTorch':>12} {'ours/PyTorch':>13}")
for name, tg_dtype, th_dtype in (("float16", dtypes.float16, torch.float16), ("bfloat16", dtypes.bfloat16, torch.bfloat16),
                                 ("float32", dtypes.float32, torch.float32)):
    for n in (4096, 8192):
        a = ours(lambda: (Tensor.rand(n, n, dtype=tg_dtype), Tensor.rand(n, n, dtype=tg_dtype)), lambda x, y: x @ y)
        b = theirs(lambda: (torch.rand(n, n, dtype=th_dtype, device="cuda"), torch.rand(n, n, dtype=th_dtype, device="cuda")),
                   lambda x, y: x @ y)
        tflops = 2 * n**3 / 1e12
        print(f"{'matmul ' + name + ' ' + str(n):<34} {tflops / a:8.1f} TF/s {tflops / b:8.1f} TF/s {a / b:12.2f}x")
n = 1 << 26
gb = 16 * n / 1e9  # three float32 reads and one write
a = ours(lambda: tuple(Tensor.rand(n) for _ in range(3)), lambda x, y, z: x * y + z)
b = theirs(lambda: tuple(torch.rand(n, device="cuda") for _ in range(3)), lambda x, y, z: torch.addcmul(z, x, y))
print(f"{'fused a*b+c, 64M float32':<34} {gb / a:8.0f} GB/s {gb / b:8.0f} GB/s {a / b:12.2f}x")
print("ours/PyTorch: time ratio (2.00x = twice as slow); no tensor cores in this backend yet")
PY
}
stage "bench vs PyTorch (CUDA)" bench

section "summary"
if [ ${#FAILED[@]} -eq 0 ]; then echo "run_h200: all stages passed"; exit 0; fi
echo "run_h200: FAILED stages: ${FAILED[*]}"
exit 1
