"""Data-parallel training over MPI: `mpirun -n 2` of scripts/mpi_train.py ends with both ranks holding the same
weights, equal to one process training on the whole batches (tinygrad.distributed, the `tg-core[mpi]` extra)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).parent / "scripts" / "mpi_train.py"
#: a rank that fails or hangs must not hang the run: the whole launch is killed after this long
TIMEOUT_S = 300

pytestmark = [
    pytest.mark.skipif(shutil.which("mpirun") is None,
                       reason="no mpirun: install Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev)"),
    pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                       reason="no mpi4py: pip install 'tg-core[mpi]' (needs an MPI library)"),
]


def _run(cmd: list[str], cwd: Path) -> None:
    # one CPU thread per process: the ranks share the machine's cores
    env = {**os.environ, "DEV": "CPU", "CPU_THREADS": "1"}
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own process group: killing it takes the ranks along
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} did not finish in {TIMEOUT_S} s (a rank failed or hung):\n{out[-4000:]}")
    assert proc.returncode == 0, f"{' '.join(cmd)} exited with {proc.returncode}:\n{out[-4000:]}"


def _weights(path: Path) -> list[np.ndarray]:
    with np.load(path) as f:
        return [f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))]


def test_two_ranks_train_as_one_process_on_the_whole_batch(tmp_path: Path) -> None:
    _run([sys.executable, str(SCRIPT), str(tmp_path / "one")], tmp_path)
    launch = ["mpirun", "-n", "2", "--oversubscribe", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        launch.append("--allow-run-as-root")  # CI containers run as root; Open MPI refuses that unless told
    _run([*launch, sys.executable, str(SCRIPT), str(tmp_path / "two")], tmp_path)
    one, rank0, rank1 = (_weights(tmp_path / f"{name}.npz") for name in ("one.rank0", "two.rank0", "two.rank1"))
    assert len(one) == len(rank0) == len(rank1) == 4
    for a, b in zip(rank0, rank1):
        np.testing.assert_array_equal(a, b)  # every rank took the same step: the same bits
    for a, b in zip(rank0, one):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
