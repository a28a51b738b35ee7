"""A compile cache that checks what it serves: entries moved, swapped, cut short or replaced by something that is not
a file are rebuilt, and every kernel still computes its own function.

Each case runs real Tensor computations on the CPU device in a fresh process (the in-process kernel caches would
hide the disk cache), with a time limit so a read that blocks fails the test instead of hanging it, and an
address-space limit so a read that never ends fails instead of exhausting the machine's memory."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

X = np.arange(8, dtype=np.float32)
EXPECTED = {"plus_one": (X + 1).tolist(), "twice": (X * 2).tolist(), "total": [float(X.sum())]}

# three kernels: the first two have the same name (elementwise kernels of one shape), the third another one.
# `seed`: compute the kernels one by one and print which new cache file each one wrote; `run`: print their results
SCRIPT = textwrap.dedent("""
    import json, resource, sys
    limit = int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import numpy as np
    from tinygrad import Tensor
    from tinygrad.helpers import cache_dir
    kernels = {"plus_one": lambda x: x + 1, "twice": lambda x: x * 2, "total": lambda x: x.sum(keepdim=True)}
    x = Tensor(np.arange(8, dtype=np.float32)).realize()
    folder = cache_dir() / "compile"
    out = {}
    for name, fn in kernels.items():
        before = set(folder.iterdir()) if folder.exists() else set()
        result = fn(x).numpy().tolist()
        out[name] = [p.name for p in set(folder.iterdir()) - before] if sys.argv[1] == "seed" else result
    print(json.dumps(out))
""")

#: far above what the script needs, far below what reading an endless file would take
ADDRESS_SPACE_LIMIT = 2 << 30


def run_script(mode: str, cache: Path) -> tuple[dict[str, list], str]:
    env = {**os.environ, "TINYGRAD_CACHE_DIR": str(cache), "DEV": "CPU", "DEBUG": "0"}
    env.pop("DISABLE_COMPILER_CACHE", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(ADDRESS_SPACE_LIMIT)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A cache holding the three kernels' entries, and the file name of each."""
    cache = tmp_path_factory.mktemp("seeded") / "cache"
    files, _ = run_script("seed", cache)
    assert all(len(names) == 1 for names in files.values()), files
    return cache, {name: names[0] for name, names in files.items()}


def tamper(folder: Path, entry: dict[str, str], damage: str) -> None:
    path = {name: folder / file for name, file in entry.items()}
    blob = {name: p.read_bytes() for name, p in path.items()}
    if damage == "copied":  # one kernel's entry copied over another's of the same kernel name
        path["twice"].write_bytes(blob["plus_one"])
    elif damage == "rotated":  # every entry moved to the next kernel's file
        path["plus_one"].write_bytes(blob["total"])
        path["twice"].write_bytes(blob["plus_one"])
        path["total"].write_bytes(blob["twice"])
    elif damage == "truncated":
        path["twice"].write_bytes(blob["twice"][: len(blob["twice"]) // 2])
    elif damage == "fifo":
        path["twice"].unlink()
        os.mkfifo(path["twice"])
    elif damage == "endless":
        path["twice"].unlink()
        path["twice"].symlink_to("/dev/zero")
    else:
        raise AssertionError(damage)


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"), reason="needs FIFOs and /dev/zero")
@pytest.mark.parametrize("damage", ["copied", "rotated", "truncated", "fifo", "endless"])
def test_a_tampered_entry_is_rebuilt_and_every_kernel_computes_its_own_function(
        seeded: tuple[Path, dict[str, str]], tmp_path: Path, damage: str) -> None:
    source, entry = seeded
    cache = tmp_path / "cache"
    shutil.copytree(source, cache, symlinks=True)
    tamper(cache / "compile", entry, damage)
    results, stderr = run_script("run", cache)
    assert results == EXPECTED
    assert "Warning" not in stderr  # a skipped entry is quietly rebuilt
    for file in entry.values():  # and overwritten by a good one, which the next process is served
        assert stat.S_ISREG((cache / "compile" / file).lstat().st_mode)
    assert run_script("run", cache)[0] == EXPECTED
