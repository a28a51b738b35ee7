#!/usr/bin/env bash
# The README's first command: set up a venv and train examples/beautiful_mnist.py on Fashion-MNIST on the CPU.
#
#   bash examples/train_mnist.sh                                  # 70 steps, prints the test accuracy
#   STEPS=200 TARGET_EVAL_ACC_PCT=85 bash examples/train_mnist.sh   # and fails below 85%
#
# Fashion-MNIST comes from Debian's dataset-fashion-mnist package (installed here when run as root with apt and
# the files are absent), or from FASHION_MNIST_DIR; see tinygrad.nn.datasets for every place it is looked for.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${FASHION_MNIST_DIR:-}" ] \
   && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends dataset-fashion-mnist >/dev/null
fi
VENV="${VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
# the framework packages as they are, no extras: the CPU backend brings llvmlite and compiles kernels in process
# (no C compiler needed)
"$VENV/bin/pip" install -q --disable-pip-version-check \
  -e packages/tg-core -e packages/tg-compiler -e packages/tg-backend-cpu -e packages/tg-nn
DEV=CPU FASHION=1 STEPS="${STEPS:-70}" \
  "$VENV/bin/python" examples/beautiful_mnist.py
