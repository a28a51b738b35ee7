"""BEAM search: it picks opts by timing them on the device, caches the choice on disk per kernel, device,
renderer and compiler, and ignores cache entries that are corrupt or from another version."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from opt_helpers import device_or_skip, matmul_ast, run_ast
from tinygrad import helpers
from tinygrad.codegen import beam
from tinygrad.codegen.beam import _cache_file, ast_key, candidate_actions, read_cached, write_cached
from tinygrad.codegen.lowerer import lower_kernel
from tinygrad.codegen.opt import Opt, OptOps, OptState
from tinygrad.helpers import Context, disk_cache_get, disk_cache_put
from tinygrad.runtime import beam_timing
from tinygrad.runtime.beam_timing import searched_opts


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(tmp_path))  # entries of earlier runs must not answer


@pytest.fixture
def quick_search(monkeypatch: pytest.MonkeyPatch) -> None:
    # one step of one timing run per candidate keeps the test short; the machinery is the same
    monkeypatch.setattr(beam, "MAX_STEPS", 1)
    monkeypatch.setattr(beam_timing, "TIMING_RUNS", 1)
    monkeypatch.setattr(beam, "UPCAST_AMOUNTS", (2, 4))
    monkeypatch.setattr(beam, "UNROLL_AMOUNTS", (4,))
    monkeypatch.setattr(beam, "LOCAL_AMOUNTS", (4,))
    monkeypatch.setattr(beam, "GROUP_AMOUNTS", (16,))


def test_ast_keys_tell_kernels_apart_and_are_stable() -> None:
    assert ast_key(matmul_ast(4, 8, 4)) == ast_key(matmul_ast(4, 8, 4))
    assert ast_key(matmul_ast(4, 8, 4)) != ast_key(matmul_ast(4, 8, 8))


def test_candidates_cover_every_kind_of_opt_for_a_gpu() -> None:
    state = OptState.from_lowered(lower_kernel(matmul_ast(8, 16, 12)))
    kinds = {o.op for o in candidate_actions(state, has_local=True)}
    assert kinds == {OptOps.UPCAST, OptOps.UNROLL, OptOps.LOCAL, OptOps.GROUP, OptOps.SWAP}
    assert {o.op for o in candidate_actions(state, has_local=False)} == {OptOps.UPCAST, OptOps.UNROLL, OptOps.SWAP,
                                                                         OptOps.TILE}


def test_cache_entries_round_trip_and_stale_or_corrupt_ones_are_ignored() -> None:
    key = "test\0kernel-a"
    opts = (Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 2, 2))
    assert read_cached(key) is None
    write_cached(key, opts)
    assert read_cached(key) == opts
    raw = disk_cache_get("beam", key, ".json")
    assert raw is not None
    entry = json.loads(raw)

    def store(text: str | bytes) -> None:  # a well-formed record for this key, so the JSON's own checks decide
        disk_cache_put("beam", key, text if isinstance(text, bytes) else text.encode(), ".json")
    store(json.dumps({**entry, "version": beam.SEARCH_VERSION + 1}))
    assert read_cached(key) is None  # another version
    store(json.dumps({**entry, "key": "test\0kernel-b"}))
    assert read_cached(key) is None  # another kernel under the same file name
    store('{"version": 1, "key": "te')
    assert read_cached(key) is None  # truncated
    store(b"\xff\x00garbage")
    assert read_cached(key) is None
    store(json.dumps({**entry, "opts": [["NOT_AN_OPT", 0, 1]]}))
    assert read_cached(key) is None
    path = _cache_file(key)
    path.write_text(json.dumps(entry))  # a bare JSON file: not a record of the disk cache
    assert read_cached(key) is None


def test_another_kernels_entry_copied_over_this_ones_file_is_a_miss() -> None:
    mine, other = "test\0kernel-a", "test\0kernel-b"
    write_cached(mine, (Opt(OptOps.UPCAST, 0, 4),))
    write_cached(other, (Opt(OptOps.UNROLL, 1, 2),))
    _cache_file(mine).write_bytes(_cache_file(other).read_bytes())
    assert read_cached(mine) is None
    write_cached(mine, (Opt(OptOps.UPCAST, 0, 4),))  # the search's new result overwrites it
    assert read_cached(mine) == (Opt(OptOps.UPCAST, 0, 4),)


def test_an_unwritable_cache_warns_and_the_search_result_is_still_used(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # a cache folder under a regular file cannot be made, for root as well (CI runs as root)
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    monkeypatch.setattr(helpers, "_disk_cache_warned", set())
    with pytest.warns(RuntimeWarning, match="beam cache cannot be written"):
        write_cached("test\0kernel-a", (Opt(OptOps.UPCAST, 0, 4),))  # before the shared helper this raised
    assert read_cached("test\0kernel-a") is None


@pytest.mark.parametrize("dev_name", ["CPU", "CL"])
def test_search_result_is_correct_cached_and_rebuilt_when_corrupt(dev_name: str, quick_search: None) -> None:
    dev = device_or_skip(dev_name)
    ast = matmul_ast(8, 16, 12)
    opts = searched_opts(dev, ast, 2)
    _cache_dir = _cache_file("x").parent
    assert any(_cache_dir.glob("*.json")), "the search wrote no cache entry"
    # a second call is served by the cache: the search must not run again
    calls = []
    real = beam_timing.timed_search
    beam_timing.timed_search = lambda *a: calls.append(a) or real(*a)  # type: ignore[assignment]
    try:
        assert searched_opts(dev, ast, 2) == opts and not calls
        for f in _cache_dir.glob("*.json"):
            f.write_text("corrupt{")
        searched_again = searched_opts(dev, ast, 2)
        assert len(calls) == 1  # searched again, and wrote a valid entry
        assert searched_opts(dev, ast, 2) == searched_again and len(calls) == 1  # which the next call is served
    finally:
        beam_timing.timed_search = real  # type: ignore[assignment]
    x = {1: np.random.default_rng(0).standard_normal(8 * 16).astype(np.float32),
         2: np.random.default_rng(1).standard_normal(16 * 12).astype(np.float32)}
    out, _ = run_ast(dev, ast, x, 8 * 12, opts)
    np.testing.assert_allclose(out.reshape(8, 12), x[1].reshape(8, 16) @ x[2].reshape(16, 12), rtol=1e-5, atol=1e-5)


def test_beam_in_the_pipeline_runs_tensors_right(quick_search: None) -> None:
    from tinygrad import Tensor

    dev = device_or_skip("CPU")
    a = np.random.default_rng(2).standard_normal((3, 1000)).astype(np.float32)
    dev._runners.clear()
    with Context(BEAM=1):
        got = Tensor(a, device="CPU").sum(1).numpy()
    dev._runners.clear()
    np.testing.assert_allclose(got, a.sum(1), rtol=1e-4, atol=1e-4)
    assert any(_cache_file("x").parent.glob("*.json"))
