"""The ONNX backend node tests as folders of `model.onnx` + `test_data_set_*/{input,output}_*.pb`.

The onnx wheel once shipped them under onnx/backend/test/data/node; the installed one (1.23.2) ships only the
generators (`onnx.backend.test.case.node`). When the folder is missing, the generators write it once into a cache
folder (keyed by the onnx version), exactly as onnx's own `backend-test-tools generate-data` would; concurrent
pytest-xdist workers wait on a lock for the first one to finish.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np


def node_data_dir(onnx: Any) -> Path:
    shipped = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"
    if shipped.is_dir() and any(shipped.iterdir()):
        return shipped
    from tinygrad.helpers import cache_dir
    base = Path(os.environ.get("TG_ONNX_NODE_DATA") or cache_dir() / "onnx-node-tests")
    target = base / onnx.__version__
    if (target / ".complete").exists():
        return target
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError:  # no writable cache folder: the system's temporary folder
        base = Path(tempfile.gettempdir()) / "tg-onnx-node-tests"
        target = base / onnx.__version__
        if (target / ".complete").exists():
            return target
        base.mkdir(parents=True, exist_ok=True)
    with open(base / f".{onnx.__version__}.lock", "w") as lock:
        _lock(lock)
        if not (target / ".complete").exists():
            tmp = Path(tempfile.mkdtemp(prefix=".gen-", dir=base))
            _generate(onnx, tmp)
            (tmp / ".complete").write_text("ok\n")
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(target)
            os.replace(tmp, target)
    return target


def _lock(f: Any) -> None:
    try:
        import fcntl
    except ImportError:  # not POSIX: workers may generate the data twice, each into its own temporary folder
        return
    fcntl.flock(f, fcntl.LOCK_EX)


def _generate(onnx: Any, out: Path) -> None:
    from onnx import numpy_helper
    from onnx.backend.test.case import node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.random.seed(0)
        cases = node_cases.collect_testcases()
    for case in cases:
        folder = out / case.name
        folder.mkdir(parents=True)
        (folder / "model.onnx").write_bytes(case.model.SerializeToString())
        for i, (inputs, outputs) in enumerate(case.data_sets):
            ds = folder / f"test_data_set_{i}"
            ds.mkdir()
            for kind, values, infos in (("input", inputs, case.model.graph.input),
                                        ("output", outputs, case.model.graph.output)):
                for j, v in enumerate(values):
                    tp = infos[j].type
                    name = infos[j].name
                    if isinstance(v, onnx.TensorProto):
                        proto = v
                    elif tp.HasField("sequence_type"):
                        proto = numpy_helper.from_list(v, name)
                    elif tp.HasField("optional_type"):
                        proto = numpy_helper.from_optional(v, name)
                    else:
                        proto = numpy_helper.from_array(np.asarray(v), name)
                    (ds / f"{kind}_{j}.pb").write_bytes(proto.SerializeToString())


def read_value(onnx: Any, path: Path, type_proto: Any) -> Any:
    """One .pb file as numpy (a list for a sequence, None for an empty optional), by the graph's declared type."""
    from onnx import numpy_helper

    data = path.read_bytes()
    if type_proto.HasField("sequence_type"):
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return numpy_helper.to_list(seq)
    if type_proto.HasField("optional_type"):
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        return numpy_helper.to_optional(opt)
    t = onnx.TensorProto()
    t.ParseFromString(data)
    return numpy_helper.to_array(t)
