"""Small shared utilities: environment knobs, `Context`, `GlobalCounters`, caching paths, iteration helpers, and
the names tinygrad programs import from `tinygrad.helpers` (`Timing`, `tqdm`/`trange`, `fetch`, `flatten`, ...).

Nothing here imports the rest of tinygrad: every other module may import this one."""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import os
import pathlib
import platform
import shutil
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")

OSX = platform.system() == "Darwin"
#: set in continuous integration: progress bars stay quiet
CI = os.environ.get("CI", "") != ""


@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
    """Read an environment variable, converted to the type of `default`."""
    return type(default)(os.environ.get(key, default))


def prod(xs: Iterable[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def argsort(xs: Sequence[Any]) -> list[int]:
    return sorted(range(len(xs)), key=xs.__getitem__)


# ---- small list and number helpers, as tinygrad's ----

def flatten(lists: Iterable[Iterable[T]]) -> list[T]:
    """One level of nesting removed: [[1, 2], [3]] -> [1, 2, 3]."""
    return [item for inner in lists for item in inner]


def fully_flatten(x: Any) -> list[Any]:
    """Every leaf of nested lists, tuples and arrays, in order (strings count as leaves)."""
    if isinstance(x, (str, bytes)) or not (hasattr(x, "__len__") and hasattr(x, "__getitem__")):
        return [x]
    if getattr(x, "shape", None) == ():  # a 0-d numpy array is a scalar
        return [x[()]]
    return [leaf for item in x for leaf in fully_flatten(item)]


def dedup(xs: Iterable[T]) -> list[T]:
    """The items without repeats, in first-seen order."""
    return list(dict.fromkeys(xs))


def argfix(*x: Any) -> tuple[Any, ...]:
    """Arguments given as f(1, 2) or f((1, 2)) or f([1, 2]), as one tuple."""
    if x and isinstance(x[0], (tuple, list)):
        if len(x) != 1:
            raise ValueError(f"pass either one tuple/list or separate values, not both: {x}")
        return tuple(x[0])
    return x


def all_same(items: Sequence[Any]) -> bool:
    return all(x == items[0] for x in items)  # True for an empty sequence


def all_int(xs: Sequence[Any]) -> bool:
    return all(isinstance(x, int) for x in xs)


def make_tuple(x: int | Sequence[int], cnt: int) -> tuple[int, ...]:
    """`x` repeated `cnt` times when it is an int (a kernel size of 3 -> (3, 3)), else `x` as a tuple."""
    return (x,) * cnt if isinstance(x, int) else tuple(x)


def ceildiv(num: Any, amt: Any) -> Any:
    """num / amt rounded up, for ints (and anything with Python's floor division)."""
    out = -(num // -amt)
    return int(out) if isinstance(out, float) else out


def round_up(num: int, amt: int) -> int:
    """The smallest multiple of `amt` that is >= num."""
    return ceildiv(num, amt) * amt


def round_down(num: int, amt: int) -> int:
    return num // amt * amt


def partition(items: Iterable[T], predicate: Callable[[T], bool]) -> tuple[list[T], list[T]]:
    """(the items for which `predicate` holds, the others), each in order."""
    yes: list[T] = []
    no: list[T] = []
    for item in items:
        (yes if predicate(item) else no).append(item)
    return yes, no


def unwrap(x: T | None) -> T:
    """`x`, which must not be None."""
    if x is None:
        raise ValueError("unwrap: the value is None")
    return x


def get_child(obj: Any, key: str) -> Any:
    """Follow a dotted path of attributes, dict keys and list indices: get_child(model, "layers.0.attn.wq")."""
    for part in key.split("."):
        if part.isnumeric():
            obj = obj[int(part)]
        elif isinstance(obj, dict):
            obj = obj[part]
        else:
            obj = getattr(obj, part)
    return obj


_COLORS = ("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white")


def colored(text: str, color: str | None, background: bool = False) -> str:
    """`text` in a terminal colour (tinygrad's names; an upper-case name is the bright variant). Plain text when
    stdout is not a terminal, so that logs and pipes stay free of escape codes."""
    if color is not None and color.lower() not in _COLORS:
        raise ValueError(f"unknown color {color!r}; use one of {', '.join(_COLORS)} (upper case: bright)")
    if color is None or not sys.stdout.isatty():
        return text
    code = 30 + _COLORS.index(color.lower()) + (60 if color.isupper() else 0) + (10 if background else 0)
    return f"\033[{code}m{text}\033[0m"


class ContextVar:
    """A named integer knob, initialised from the environment and overridable with `Context`."""

    registry: dict[str, ContextVar] = {}

    def __init__(self, key: str, default: int):
        self.key = key
        self.value = int(os.environ.get(key, default))
        ContextVar.registry[key] = self

    def __bool__(self) -> bool:
        return bool(self.value)

    def __ge__(self, other: int) -> bool:
        return self.value >= other

    def __gt__(self, other: int) -> bool:
        return self.value > other

    def __le__(self, other: int) -> bool:
        return self.value <= other

    def __lt__(self, other: int) -> bool:
        return self.value < other

    def __int__(self) -> int:
        return self.value

    def __eq__(self, other: object) -> bool:
        # `DEBUG == 2` compares the value, as tinygrad's ContextVar does; two knobs are equal only if they are one
        return self is other if isinstance(other, ContextVar) else self.value == other

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"ContextVar({self.key}={self.value})"


class _GlobalCounters:
    """What this process has run, as tinygrad counts it: kernels launched (`kernel_count`, JIT replays and copy
    kernels included), their estimated FLOPs (`global_ops`) and bytes read and written (`global_mem`), the device
    time of timed launches in seconds (`time_sum_s`, with DEBUG>=2), and the bytes of device memory held now
    (`mem_used`). `GlobalCounters.reset()` zeroes the first four; memory stays counted until it is freed."""

    __slots__ = ("global_mem", "global_ops", "kernel_count", "mem_used", "time_sum_s")

    def __init__(self) -> None:
        self.global_ops = self.global_mem = self.kernel_count = self.mem_used = 0
        self.time_sum_s = 0.0

    def reset(self) -> None:
        self.global_ops = self.global_mem = self.kernel_count = 0
        self.time_sum_s = 0.0

    def count_launches(self, n: int, ops: int, mem: int) -> None:
        self.kernel_count += n
        self.global_ops += ops
        self.global_mem += mem


# One object with slots, where tinygrad has a class with class attributes: every launch and every buffer's allocation
# and free writes these, and writing a class attribute invalidates the type's attribute cache, which costs several
# times an instance's slot. Reading and writing `GlobalCounters.kernel_count` and calling `reset()` are the same.
GlobalCounters = _GlobalCounters()


DEBUG = ContextVar("DEBUG", 0)
NOOPT = ContextVar("NOOPT", 0)
DISABLE_COMPILER_CACHE = ContextVar("DISABLE_COMPILER_CACHE", 0)
#: JIT=0: TinyJit functions run eagerly on every call (nothing is captured or replayed)
JIT = ContextVar("JIT", 1)
#: BEAM=n: pick each kernel's optimisations by a beam search of width n, timing them on the device
BEAM = ContextVar("BEAM", 0)
#: PROFILE=1: write a Chrome trace of every launch, copy and compile at exit (engine/profile.py)
PROFILE = ContextVar("PROFILE", 0)
#: VIZ=1: record each schedule's graph and each kernel's passes, then save and serve them at exit (tinygrad/viz)
VIZ = ContextVar("VIZ", 0)
#: TRAINING=1 (or `Context(TRAINING=1)`, tinygrad's spelling): training mode, as `Tensor.training = True` is
TRAINING = ContextVar("TRAINING", 0)


class Context(contextlib.ContextDecorator):
    """Temporarily set knobs: `with Context(DEBUG=2): ...`."""

    def __init__(self, **kwargs: int):
        unknown = [k for k in kwargs if k not in ContextVar.registry]
        if unknown:
            raise KeyError(f"unknown Context variable(s) {unknown}; known ones are {sorted(ContextVar.registry)}")
        self.kwargs = kwargs
        self.saved: dict[str, int] = {}

    def __enter__(self) -> Context:
        for k, v in self.kwargs.items():
            self.saved[k] = ContextVar.registry[k].value
            ContextVar.registry[k].value = int(v)
        return self

    def __exit__(self, *exc: object) -> None:
        for k, v in self.saved.items():
            ContextVar.registry[k].value = v


def cache_dir() -> pathlib.Path:
    """Where compiled kernels are cached: $TINYGRAD_CACHE_DIR, else the user's cache directory."""
    if (override := os.environ.get("TINYGRAD_CACHE_DIR")) is not None:
        return pathlib.Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "tinygrad"


# ---- the disk cache ----
# One policy for every on-disk cache (compiled binaries, BEAM choices): the cache only saves time, so it must never
# stop a program. A read that fails is a miss; a write that fails (read-only or full disk, a home that is not a
# folder) warns once per table and the program goes on; an entry is written to a temporary file in its folder and
# renamed into place, so concurrent writers and readers only ever see whole entries. Callers check what they read
# (a checksum, a version): a corrupt entry is theirs to treat as a miss and overwrite.

_disk_cache_warned: set[str] = set()


def disk_cache_path(table: str, key: str, suffix: str = ".bin") -> pathlib.Path:
    """The file of `key` in `table`: `cache_dir()/table/<sha256 of key><suffix>`."""
    return cache_dir() / table / f"{hashlib.sha256(key.encode()).hexdigest()}{suffix}"


def disk_cache_get(table: str, key: str, suffix: str = ".bin") -> bytes | None:
    """The bytes stored under `key` in `table`, or None when there are none or they cannot be read."""
    try:
        return disk_cache_path(table, key, suffix).read_bytes()
    except OSError:
        return None


def disk_cache_put(table: str, key: str, value: bytes, suffix: str = ".bin") -> bool:
    """Store `value` under `key` in `table` atomically. Returns whether it was stored; a failure warns once."""
    path = disk_cache_path(table, key, suffix)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(value)
        os.replace(tmp, path)
        tmp = None
        return True
    except OSError as e:
        if table not in _disk_cache_warned:
            _disk_cache_warned.add(table)
            warnings.warn(f"tinygrad's {table} cache cannot be written ({e}), so its entries are rebuilt in every "
                          f"process; make {cache_dir()} writable or set TINYGRAD_CACHE_DIR to a writable folder",
                          RuntimeWarning, stacklevel=2)
        return False
    finally:
        if tmp is not None:  # a write that failed half way must not leave its temporary file behind
            with contextlib.suppress(OSError):
                os.unlink(tmp)



# ---- timing ----

class Timing(contextlib.ContextDecorator):
    """Print how long a block took: `with Timing("step "): ...` prints `step  12.34 ms`. `on_exit` gets the elapsed
    nanoseconds and returns a string to append (e.g. a throughput); `enabled=False` keeps it quiet."""

    def __init__(self, prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True):
        self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled
        self.elapsed_ns = 0

    def __enter__(self) -> Timing:
        self.start_ns = time.perf_counter_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed_ns = self.et = time.perf_counter_ns() - self.start_ns  # `et`: tinygrad's name
        if self.enabled:
            print(f"{self.prefix}{self.elapsed_ns * 1e-6:6.2f} ms" + (self.on_exit(self.elapsed_ns) if self.on_exit
                                                                        else ""))


class Profiling(contextlib.ContextDecorator):
    """Profile a block with cProfile and print the functions that took the most time (`frac` of them, sorted by
    `sort`); `fn` also saves the raw statistics there."""

    def __init__(self, enabled: bool = True, sort: str = "cumtime", frac: float = 0.2, fn: str | None = None):
        self.enabled, self.sort, self.frac, self.fn = enabled, sort, frac, fn

    def __enter__(self) -> Profiling:
        import cProfile

        self.profile = cProfile.Profile()
        if self.enabled:
            self.profile.enable()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.enabled:
            return
        import pstats

        self.profile.disable()
        if self.fn:
            self.profile.dump_stats(self.fn)
        pstats.Stats(self.profile).strip_dirs().sort_stats(self.sort).print_stats(self.frac)


# ---- progress bars ----

def _si(x: float) -> str:
    """A count with an SI suffix and three significant digits: 1234567 -> 1.23M."""
    for suffix in ("", "k", "M", "G", "T", "P"):
        if abs(x) < 999.5 or suffix == "P":
            return f"{x:.3g}{suffix}"
        x /= 1000
    return str(x)


def _clock(seconds: float) -> str:
    """mm:ss, or h:mm:ss from an hour on."""
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


class tqdm(Generic[T]):
    """A progress bar on stderr, as tinygrad's own `tqdm`: wrap an iterable (`for x in tqdm(data, desc="load")`) or
    count by hand (`bar = tqdm(total=n); bar.update(k)`). Redraws at most every `mininterval` seconds; `disable=True`
    draws nothing. The tqdm package is not needed."""

    def __init__(self, iterable: Iterable[T] | None = None, desc: str = "", disable: bool = False, unit: str = "it",
                 unit_scale: bool = False, total: int | None = None, mininterval: float = 0.1, **_ignored: Any):
        self.iterable, self.disable, self.unit, self.unit_scale = iterable, disable, unit, unit_scale
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.total, self.n, self.mininterval = total, 0, mininterval
        self.start = self._last_draw = time.perf_counter()
        self.closed = False
        self.set_description(desc)
        self._draw()

    @property
    def t(self) -> int:
        return self.total or 0  # tinygrad's name for the total

    def set_description(self, desc: str) -> None:
        self.desc = f"{desc}: " if desc else ""

    def __iter__(self) -> Iterator[T]:
        if self.iterable is None:
            raise TypeError("this tqdm has no iterable to go over; pass one, or count with update(n)")
        for item in self.iterable:
            yield item
            self.update(1)
        self.close()

    def __len__(self) -> int:
        return self.t

    def __enter__(self) -> tqdm[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1, close: bool = False) -> None:
        self.n += n
        if close:
            self.close()
        elif time.perf_counter() - self._last_draw >= self.mininterval:
            self._draw()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._draw(final=True)

    def format(self, width: int) -> str:
        """The bar's line for a terminal `width` columns wide."""
        elapsed = time.perf_counter() - self.start
        done = f"{self._count(self.n)}/{self._count(self.total)}" if self.total else f"{self._count(self.n)}{self.unit}"
        rate = "?" if not (self.n and elapsed) else _si(self.n / elapsed) if self.unit_scale else \
            f"{self.n / elapsed:.2f}"
        eta = "" if not self.total else f"<{_clock(elapsed * (self.total - self.n) / self.n)}" if self.n else "<?"
        suffix = f"{done} [{_clock(elapsed)}{eta}, {rate}{self.unit}/s]"
        if not self.total:
            return self.desc + suffix
        frac = min(self.n / self.total, 1.0)
        bar_width = max(width - len(self.desc) - len(suffix) - 8, 1)
        filled = int(frac * bar_width)
        return f"{self.desc}{100 * frac:3.0f}%|{'#' * filled}{' ' * (bar_width - filled)}| {suffix}"

    def _count(self, x: float) -> str:
        return _si(x) if self.unit_scale else str(int(x))

    def _draw(self, final: bool = False) -> None:
        self._last_draw = time.perf_counter()
        if self.disable:
            return
        width = shutil.get_terminal_size().columns
        print("\r" + self.format(width)[:width], end="\n" if final else "", file=sys.stderr, flush=True)

    @classmethod
    def write(cls, s: str) -> None:
        """Print a line above a bar that is being drawn."""
        print(f"\r\033[K{s}", file=sys.stderr, flush=True)


def trange(n: int, **kwargs: Any) -> tqdm[int]:
    """tqdm(range(n))."""
    return tqdm(range(n), total=n, **kwargs)


# ---- downloads ----

def downloads_dir() -> pathlib.Path:
    return cache_dir() / "downloads"


def _local_path(url: str) -> pathlib.Path | None:
    """The file a file:// URL or a plain path names; None for a URL to download."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        return pathlib.Path(urllib.request.url2pathname(parsed.path))
    # no scheme: a path; a one-letter scheme is a Windows drive (C:\data)
    return pathlib.Path(url) if len(parsed.scheme) <= 1 else None


def fetch(url: str, name: str | pathlib.Path | None = None, subdir: str | None = None, gunzip: bool = False,
          allow_caching: bool = not getenv("DISABLE_HTTP_CACHE"), headers: dict[str, str] | None = None,
          timeout: float = 10.0) -> pathlib.Path:
    """A local path to the contents of `url`, as tinygrad's `fetch`.

    http(s) URLs are downloaded once into `cache_dir()/downloads[/subdir]`, under `name` or a hash of the URL (and of
    `headers`), and later calls return the cached file without touching the network (`allow_caching=False` or
    DISABLE_HTTP_CACHE=1 downloads again). A `name` with a "/" is the full destination path. `gunzip=True`
    stores the decompressed bytes. file:// URLs and plain paths are read where they are (decompressed into the
    cache with `gunzip`). A failed download raises ConnectionError naming the URL and where to put the file."""
    if (local := _local_path(url)) is not None:
        if not local.is_file():
            raise FileNotFoundError(f"fetch({url!r}): there is no file {local}")
        if not gunzip:
            return local
    if name is not None and (isinstance(name, pathlib.Path) or "/" in name):
        dest = pathlib.Path(name)
    else:
        header_key = "\n".join(f"{k}:{v}" for k, v in sorted((headers or {}).items()))
        key = name or hashlib.sha256(url.encode()).hexdigest()[:32]
        suffix = ("_" + hashlib.sha256(header_key.encode()).hexdigest()[:16] if header_key else "") + \
            (".gunzip" if gunzip else "")
        dest = downloads_dir() / (subdir or "") / f"{key}{suffix}"
    if dest.is_file() and allow_caching:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    if local is not None:
        with gzip.open(local, "rb") as src:
            return _save(src, dest, None, f"{local}")
    request = urllib.request.Request(url, headers={"User-Agent": "tinygrad", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            length = int(response.headers.get("content-length") or 0) or None
            if gunzip:
                with gzip.GzipFile(fileobj=response) as src:
                    return _save(src, dest, None, url)
            return _save(response, dest, length, url)
    except OSError as e:  # URLError, HTTPError, timeouts and refused connections are all OSErrors
        reason = getattr(e, "reason", None) or e
        raise ConnectionError(f"fetch could not download {url}: {reason}. Check the URL and the network, or put the "
                              f"file at {dest} (fetch reads it from there)") from e


def _save(src: Any, dest: pathlib.Path, length: int | None, what: str) -> pathlib.Path:
    """Stream `src` into `dest` through a temporary file in the same directory, renamed at the end, so that an
    interrupted download never leaves a partial file that the next call would take for the cached one."""
    bar: tqdm[Any] = tqdm(total=length, unit="B", unit_scale=True, desc=what, disable=CI or not sys.stderr.isatty())
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := src.read(1 << 16):
                bar.update(out.write(chunk))
        written = os.path.getsize(tmp)
        if length is not None and written < length:
            raise ConnectionError(f"fetch of {what} stopped after {written} of {length} bytes; try again")
        os.replace(tmp, dest)
    finally:
        bar.close()
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest
