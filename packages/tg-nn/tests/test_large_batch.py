"""The MNIST model of examples/beautiful_mnist.py scoring 10,000 images in one batch: its convolutions' index
products pass 2**31 (10000 * 32 * 24 * 24 * 25 window reads), and the predictions must be those of batches of
1,000, run after run."""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest
from tinygrad import Tensor

EXAMPLE = pathlib.Path(__file__).parents[3] / "examples" / "beautiful_mnist.py"


@pytest.mark.skipif(not EXAMPLE.exists(), reason="runs from the monorepo checkout (examples/ is not packaged)")
def test_ten_thousand_images_in_one_batch_predict_as_in_chunks() -> None:
    spec = importlib.util.spec_from_file_location("beautiful_mnist", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    Tensor.manual_seed(3)
    model = example.Model()
    rng = np.random.default_rng(0)
    images = Tensor(rng.integers(0, 256, (10_000, 1, 28, 28)).astype(np.float32)).realize()
    logits = np.concatenate([model(images[i:i + 1000]).numpy() for i in range(0, 10_000, 1000)])
    top2 = np.sort(logits, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-3 * np.abs(top2[:, 1]).max()  # not a near-tie that rounding may flip
    for _ in range(2):  # a wrapped index read memory past the input: results changed from run to run
        whole = model(images).numpy()
        np.testing.assert_allclose(whole, logits, rtol=1e-4, atol=1e-3 * np.abs(logits).max())
        assert (whole.argmax(axis=1) == logits.argmax(axis=1))[clear].all()
