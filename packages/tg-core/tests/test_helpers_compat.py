"""The names tinygrad programs import from `tinygrad.helpers` (and `tinygrad`), and the environment knobs
DEFAULT_FLOAT and JIT. Nothing here touches the network: downloads come from a server on 127.0.0.1."""

from __future__ import annotations

import gzip
import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tinygrad import Tensor, TinyJit, dtypes
from tinygrad.helpers import (
    BEAM,
    CI,
    DEBUG,
    JIT,
    OSX,
    Context,
    ContextVar,
    Profiling,
    Timing,
    all_int,
    all_same,
    argfix,
    ceildiv,
    colored,
    dedup,
    fetch,
    flatten,
    fully_flatten,
    get_child,
    getenv,
    make_tuple,
    partition,
    prod,
    round_down,
    round_up,
    tqdm,
    trange,
    unwrap,
)


def test_what_tinygrad_examples_import_is_there() -> None:
    import tinygrad
    import tinygrad.helpers as helpers

    for name in ("getenv", "DEBUG", "Context", "Timing", "Profiling", "prod", "flatten", "fully_flatten", "colored",
                 "tqdm", "trange", "fetch", "dedup", "all_same", "all_int", "argfix", "make_tuple", "round_up",
                 "round_down", "ceildiv", "partition", "unwrap", "get_child", "GlobalCounters", "JIT", "BEAM", "CI",
                 "OSX"):
        assert hasattr(helpers, name), name
    from tinygrad import Context as C  # tinygrad's top-level names
    from tinygrad import GlobalCounters
    from tinygrad import fetch as f
    from tinygrad import getenv as g

    assert (C, f, g) == (Context, fetch, getenv) and GlobalCounters is helpers.GlobalCounters
    assert "fetch" in tinygrad.__all__
    assert isinstance(CI, bool) and isinstance(OSX, bool)


def test_context_vars_compare_like_ints() -> None:
    with Context(DEBUG=2):
        assert DEBUG >= 2 and DEBUG > 1 and DEBUG <= 2 and DEBUG < 3 and DEBUG == 2 and DEBUG != 3
        assert DEBUG.value == 2 and int(DEBUG) == 2 and bool(DEBUG)
    with Context(DEBUG=0):
        assert not DEBUG and DEBUG == 0
    assert len({DEBUG, JIT, DEBUG}) == 2  # still hashable, by identity


def test_beam_is_one_knob() -> None:
    from tinygrad.runtime.device import BEAM as compiler_beam  # what Compiled reads to decide on a search

    assert compiler_beam is BEAM and ContextVar.registry["BEAM"] is BEAM
    with Context(BEAM=2):
        assert BEAM.value == 2


# ---- small helpers ----

def test_list_helpers() -> None:
    assert flatten([[1, 2], [], [3]]) == [1, 2, 3] and flatten([(1,), [2]]) == [1, 2]
    assert fully_flatten([[1, [2, 3]], (4,), np.array([[5, 6]]), np.float32(7), "ab"]) == [1, 2, 3, 4, 5, 6, 7, "ab"]
    assert dedup([3, 1, 3, 2, 1]) == [3, 1, 2]
    assert all_same([2, 2, 2]) and not all_same([1, 2]) and all_same([])
    assert all_int((1, 2)) and not all_int((1, 2.0))
    assert argfix(1, 2) == (1, 2) and argfix((1, 2)) == (1, 2) and argfix([3]) == (3,) and argfix() == ()
    with pytest.raises(ValueError, match="either one tuple"):
        argfix((1, 2), 3)
    assert make_tuple(3, 2) == (3, 3) and make_tuple([1, 2], 2) == (1, 2)
    assert partition(range(6), lambda x: x % 2 == 0) == ([0, 2, 4], [1, 3, 5])
    assert prod([2, 3, 4]) == 24 and prod([]) == 1


def test_number_helpers() -> None:
    assert [ceildiv(n, 4) for n in (0, 1, 4, 5, -5)] == [0, 1, 1, 2, -1]
    assert ceildiv(7.0, 2) == 4 and isinstance(ceildiv(7.0, 2), int)
    assert round_up(5, 4) == 8 and round_up(8, 4) == 8 and round_down(7, 4) == 4


def test_unwrap_and_get_child() -> None:
    assert unwrap(0) == 0
    with pytest.raises(ValueError, match="None"):
        unwrap(None)

    class Layer:
        def __init__(self) -> None:
            self.weights = {"wq": [10, 20]}

    model = {"layers": [Layer(), Layer()]}
    assert get_child(model, "layers.1.weights.wq.0") == 10


def test_colored_is_plain_off_a_terminal_and_checks_the_name() -> None:
    assert colored("x", "green") == "x" and colored("x", None) == "x" and colored("x", "RED", background=True) == "x"
    with pytest.raises(ValueError, match="unknown color"):
        colored("x", "mauve")


def test_getenv_converts_to_the_default_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_TEST_KNOB", "3")
    getenv.cache_clear()
    try:
        assert getenv("TG_TEST_KNOB") == 3 and getenv("TG_TEST_KNOB", "") == "3"
        assert getenv("TG_NO_SUCH_KNOB", 1.5) == 1.5
    finally:
        getenv.cache_clear()


# ---- Timing and Profiling ----

def test_timing_prints_the_prefix_and_milliseconds(capsys: pytest.CaptureFixture[str]) -> None:
    with Timing("step ") as t:
        time.sleep(0.01)
    out = capsys.readouterr().out
    assert out.startswith("step ") and out.rstrip().endswith(" ms")
    assert 10.0 <= float(out.split()[1]) < 5000 and t.elapsed_ns >= 10_000_000 and t.et == t.elapsed_ns
    with Timing("fast ", on_exit=lambda ns: f" ({ns >= 0})"):
        pass
    assert capsys.readouterr().out.rstrip().endswith("ms (True)")
    with Timing("quiet ", enabled=False):
        pass
    assert capsys.readouterr().out == ""

    @Timing("decorated ")
    def work() -> int:
        return 1

    assert work() == 1 and capsys.readouterr().out.startswith("decorated ")


def test_profiling_prints_the_functions_that_ran(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    def busy() -> int:
        return sum(i * i for i in range(20000))

    with Profiling(fn=str(tmp_path / "prof.out"), frac=1.0):
        busy()
    assert "busy" in capsys.readouterr().out and (tmp_path / "prof.out").stat().st_size > 0


# ---- progress bars ----

def test_tqdm_over_an_iterable(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(tqdm([1, 2, 3], desc="load")) == [1, 2, 3]
    err = capsys.readouterr().err
    assert "load: " in err and "100%" in err and "3/3" in err and err.endswith("\n")


def test_tqdm_counted_by_hand(capsys: pytest.CaptureFixture[str]) -> None:
    bar: tqdm[int] = tqdm(total=10, desc="bytes", unit="B", unit_scale=True)
    bar.update(5)
    line = bar.format(80)
    assert line.startswith("bytes:  50%|#") and "5/10 [" in line and "B/s]" in line and len(line) <= 80
    bar.set_description("still bytes")
    bar.update(5, close=True)
    assert bar.n == 10 and bar.t == 10 and bar.closed
    err = capsys.readouterr().err
    assert "still bytes: 100%" in err and "10/10" in err
    with tqdm(desc="open-ended") as b:  # no total: a count and a rate, no percentage
        b.update(5)
    assert "5it" in capsys.readouterr().err


def test_tqdm_disabled_and_trange(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(tqdm(range(4), disable=True)) == [0, 1, 2, 3]
    assert capsys.readouterr().err == ""
    assert list(trange(3, desc="steps")) == [0, 1, 2]
    assert "steps: 100%" in capsys.readouterr().err
    with pytest.raises(TypeError, match="no iterable"):
        list(tqdm(total=3, disable=True))
    tqdm.write("a message")
    assert "a message" in capsys.readouterr().err


def test_tqdm_redraws_at_most_every_interval(capsys: pytest.CaptureFixture[str]) -> None:
    for _ in tqdm(range(10000), mininterval=60.0):
        pass
    assert capsys.readouterr().err.count("\r") <= 3  # the first draw and the final one, not 10000


# ---- fetch ----

@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


class _Files(http.server.BaseHTTPRequestHandler):
    bodies: dict[str, bytes] = {}
    hits: list[str] = []

    def do_GET(self) -> None:  # the name http.server calls
        _Files.hits.append(self.path)
        body = _Files.bodies.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 (a free port), serving _Files.bodies."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Files.hits.clear()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: nothing listens there


def test_fetch_reads_local_files_where_they_are(tmp_path: Path, cache: Path) -> None:
    f = tmp_path / "weights.bin"
    f.write_bytes(b"abc")
    assert fetch(f.as_uri()) == f and fetch(str(f)) == f
    assert not cache.exists()  # nothing copied
    with pytest.raises(FileNotFoundError, match="no file"):
        fetch((tmp_path / "missing.bin").as_uri())
    gz = tmp_path / "data.gz"
    gz.write_bytes(gzip.compress(b"unzipped"))
    out = fetch(str(gz), gunzip=True)
    assert out.read_bytes() == b"unzipped" and cache in out.parents


def test_fetch_downloads_once_into_the_cache(server: str, cache: Path) -> None:
    _Files.bodies = {"/model.bin": b"x" * 100_000, "/data.gz": gzip.compress(b"inside")}
    first = fetch(f"{server}/model.bin")
    assert first.read_bytes() == b"x" * 100_000 and cache / "downloads" in first.parents
    assert fetch(f"{server}/model.bin") == first and _Files.hits == ["/model.bin"]  # the second call is cached
    assert fetch(f"{server}/model.bin", allow_caching=False) == first and len(_Files.hits) == 2
    named = fetch(f"{server}/model.bin", name="m.bin", subdir="sub")
    assert named == cache / "downloads" / "sub" / "m.bin" and named.read_bytes() == first.read_bytes()
    assert fetch(f"{server}/data.gz", gunzip=True).read_bytes() == b"inside"
    assert fetch(f"{server}/model.bin", headers={"X-Key": "1"}) != first  # headers are part of the cache key
    assert not [p for p in (cache / "downloads").rglob(".*")], "temporary files are cleaned up"


def test_fetch_of_a_cached_file_needs_no_network(cache: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}/gone.bin"
    dest = cache / "downloads" / "gone.bin"
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"cached")
    assert fetch(url, name="gone.bin") == dest


def test_fetch_fails_quickly_and_clearly(server: str, cache: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}/weights.bin"
    start = time.perf_counter()
    with pytest.raises(ConnectionError, match=r"could not download http://127\.0\.0\.1:\d+/weights\.bin"):
        fetch(url, timeout=2)
    assert time.perf_counter() - start < 10
    with pytest.raises(ConnectionError, match="Not Found"):
        fetch(f"{server}/missing.bin")
    assert not list(cache.rglob("*.bin")), "a failed download leaves no file behind"


# ---- JIT=0 ----

def test_jit_0_runs_every_call_eagerly() -> None:
    runs: list[int] = []

    @TinyJit
    def step(x: Tensor) -> Tensor:
        runs.append(1)
        return (x * 2 + 1).contiguous()

    with Context(JIT=0):
        for i in range(4):
            assert step(Tensor([float(i)])).item() == 2 * i + 1
    assert len(runs) == 4 and step.captured_kernels == 0 and step.cnt == 0
    for i in range(4):  # JIT back on: eager, capture, then replays
        assert step(Tensor([float(i)])).item() == 2 * i + 1
    assert len(runs) == 6 and step.captured_kernels > 0


# ---- environment knobs read at import: run in a fresh interpreter ----

def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "DEV": os.environ.get("DEV", "CPU"), **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=300)


def test_default_float_and_jit_from_the_environment() -> None:
    code = """
from tinygrad import Tensor, TinyJit, dtypes
from tinygrad.helpers import JIT
runs = []
@TinyJit
def f(x):
    runs.append(1)
    return x + 1
for _ in range(3): f(Tensor([1.0, 2.0]))
print(dtypes.default_float.name, Tensor([1.5]).dtype.name, Tensor(2.5).dtype.name, Tensor.rand(2).dtype.name,
      Tensor.arange(0.0, 1.0, 0.5).dtype.name, Tensor([1]).float().dtype.name, JIT.value, len(runs))
"""
    for spelling, want in [("HALF", "float16"), ("FLOAT16", "float16"), ("bfloat16", "bfloat16"),
                           ("FLOAT", "float32"), ("FP8E4M3", "fp8e4m3")]:
        proc = _run(code, DEFAULT_FLOAT=spelling, JIT="0")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [want] * 5 + ["float32", "0", "3"], (spelling, proc.stdout)


def test_default_float_rejects_an_unknown_name() -> None:
    proc = _run("import tinygrad", DEFAULT_FLOAT="INT32")
    assert proc.returncode != 0
    assert "DEFAULT_FLOAT='INT32' is not a float dtype" in proc.stderr and "HALF" in proc.stderr


def test_default_float_is_float32_without_the_variable() -> None:
    assert dtypes.default_float == dtypes.float32 or os.environ.get("DEFAULT_FLOAT")


def test_context_vars_take_the_type_of_their_default(monkeypatch: pytest.MonkeyPatch) -> None:
    # tinygrad's extra/bench_log.py makes ContextVar("BENCHMARK_LOG", ""): a string knob
    monkeypatch.setenv("TG_TEST_STR_KNOB", "run-7")
    monkeypatch.setenv("TG_TEST_FLOAT_KNOB", "0.25")
    text, ratio, count = (ContextVar("TG_TEST_STR_KNOB", ""), ContextVar("TG_TEST_FLOAT_KNOB", 1.0),
                          ContextVar("TG_TEST_INT_KNOB", 3))
    assert (text.value, ratio.value, count.value) == ("run-7", 0.25, 3)
    with Context(TG_TEST_STR_KNOB="other", TG_TEST_FLOAT_KNOB=2, TG_TEST_INT_KNOB=True):
        assert (text.value, ratio.value, count.value) == ("other", 2.0, 1)
        assert type(ratio.value) is float and type(count.value) is int
    assert (text.value, ratio.value, count.value) == ("run-7", 0.25, 3)
    assert count >= 3 and int(count) == 3 and count == 3
    monkeypatch.setenv("TG_TEST_BAD_KNOB", "lots")
    with pytest.raises(ValueError, match=r"TG_TEST_BAD_KNOB='lots' is not an int"):
        ContextVar("TG_TEST_BAD_KNOB", 0)


def test_tinygrads_small_helpers_temp_mv_address_and_dtype_tables() -> None:
    # names tinygrad's own test files import: helpers.temp, helpers.mv_address, dtype.DTYPES_DICT,
    # tensor._to_np_dtype
    import getpass
    import tempfile

    from tinygrad.dtype import DTYPES_DICT
    from tinygrad.helpers import mv_address, temp
    from tinygrad.tensor import _to_np_dtype

    assert temp("scratch") == (Path(tempfile.gettempdir()) / "scratch").as_posix()
    assert temp("scratch", append_user=True).endswith(f"scratch.{getpass.getuser()}")
    arr = np.arange(8, dtype=np.int32)
    assert mv_address(memoryview(arr).cast("B")) == arr.ctypes.data
    with pytest.raises(ValueError, match="writable memoryview"):
        mv_address(memoryview(b"read only"))
    assert DTYPES_DICT["float32"] is dtypes.float32 and DTYPES_DICT["half"] is dtypes.float16
    assert not any(name.startswith(("default", "void", "_")) for name in DTYPES_DICT)
    assert _to_np_dtype(dtypes.int16) is np.int16 and _to_np_dtype(dtypes.bool) is np.bool_
    # the emulated floats come back from numpy() as float32, and so their numpy type is float32
    assert _to_np_dtype(dtypes.bfloat16) is np.float32
    assert Tensor([1.5], dtype=dtypes.bfloat16).numpy().dtype == _to_np_dtype(dtypes.bfloat16)


def test_fetch_checks_sha256_and_downloads_again_on_a_mismatch(server: str, cache: Path) -> None:
    import hashlib

    body = b"weights" * 1000
    good = hashlib.sha256(body).hexdigest()
    _Files.bodies = {"/w.bin": body}
    path = fetch(f"{server}/w.bin", sha256=good)
    assert path.read_bytes() == body
    path.write_bytes(b"corrupted")  # a damaged cache entry is not served: it is downloaded again
    assert fetch(f"{server}/w.bin", sha256=good.upper()).read_bytes() == body and len(_Files.hits) == 2
    with pytest.raises(ValueError, match="SHA-256"):
        fetch(f"{server}/w.bin", sha256="0" * 64, allow_caching=False)
    assert not path.exists(), "a download that does not match is not kept"
    local = cache.parent / "mine.bin"
    local.write_bytes(b"user data")
    with pytest.raises(ValueError, match="SHA-256"):
        fetch(str(local), sha256="0" * 64)
    assert local.read_bytes() == b"user data", "a user's own file is never removed"


def test_fetch_extracts_a_tar_archive_once_and_refuses_escaping_members(server: str, cache: Path) -> None:
    import io
    import tarfile

    def tar_of(members: dict[str, bytes], compression: str = "") -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode=f"w:{compression}") as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    _Files.bodies = {"/a.tar.gz": tar_of({"model/w.bin": b"abc", "vocab.txt": b"hi"}, "gz"),
                     "/evil.tar": tar_of({"../outside.txt": b"x"})}
    folder = fetch(f"{server}/a.tar.gz", extract=True)
    assert folder.is_dir() and folder.name.endswith(".extract")
    assert (folder / "model" / "w.bin").read_bytes() == b"abc" and (folder / "vocab.txt").read_bytes() == b"hi"
    assert fetch(f"{server}/a.tar.gz", extract=True) == folder and _Files.hits == ["/a.tar.gz"]
    with pytest.raises(ValueError, match="refused"):
        fetch(f"{server}/evil.tar", extract=True)
    assert not (cache / "downloads" / "outside.txt").exists()
    assert not [p for p in (cache / "downloads").iterdir() if p.name.startswith(".")], "no staging folder is left"
