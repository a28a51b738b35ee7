"""The worker of bench/onnx_node_anchor.py, which runs the node tests through tinygrad 0.14.0's ONNX runner in that
version's venv. Run here with this project's python, where `tinygrad.nn.onnx` is this project's runner: the same
protocol (a pickled case in, a pickled reply out, one line per case), results, and failures reported per case."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from node_data import node_data_dir, read_value  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[4] / "bench" / "onnx_node_anchor.py"
pytestmark = pytest.mark.skipif(not SCRIPT.is_file(), reason="the bench folder is not in this checkout")


def case_feeds(name: str) -> tuple[str, list[dict], list[dict]]:
    folder = node_data_dir(onnx) / name
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    inputs = [x for x in model.graph.input if x.name not in inits]
    feeds, wants = [], []
    for ds in sorted(folder.glob("test_data_set_*")):
        feeds.append({x.name: read_value(onnx, ds / f"input_{j}.pb", x.type) for j, x in enumerate(inputs)})
        outputs = enumerate(model.graph.output)
        wants.append({o.name: read_value(onnx, ds / f"output_{j}.pb", o.type) for j, o in outputs})
    return str(folder / "model.onnx"), feeds, wants


def test_the_worker_answers_each_case_and_survives_bad_ones(tmp_path: Path) -> None:
    model, feeds, wants = case_feeds("test_add")
    good, bad, unsupported = tmp_path / "good.pkl", tmp_path / "bad.pkl", tmp_path / "unsupported.pkl"
    good.write_bytes(pickle.dumps({"model": model, "feeds": feeds}))
    bad.write_bytes(b"not a pickle")
    unsupported_model = case_feeds("test_tfidfvectorizer_tf_only_bigrams_skip0")
    unsupported.write_bytes(pickle.dumps({"model": unsupported_model[0], "feeds": unsupported_model[1]}))
    requests = [good, bad, unsupported, good]
    done = subprocess.run([sys.executable, str(SCRIPT), "--worker"], input="".join(f"{r}\n" for r in requests),
                          capture_output=True, text=True, timeout=600, env={**os.environ, "DEV": "CPU"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["done"] * len(requests)
    reply = pickle.loads(good.with_suffix(".out").read_bytes())
    assert reply["status"] == "ok"
    assert len(reply["outputs"]) == len(wants) > 0
    for got, want in zip(reply["outputs"], wants):
        assert list(got) == list(want)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6)
    assert pickle.loads(bad.with_suffix(".out").read_bytes())["status"] == "failed"
    refused = pickle.loads(unsupported.with_suffix(".out").read_bytes())
    assert refused["status"] == "unsupported" and "TfIdfVectorizer" in refused["message"]

