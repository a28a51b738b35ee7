"""Small shared utilities: environment knobs, `Context`, `GlobalCounters`, caching paths, iteration helpers, and
the names tinygrad programs import from `tinygrad.helpers` (`Timing`, `tqdm`/`trange`, `fetch`, `flatten`, ...).

Nothing here imports the rest of tinygrad: every other module may import this one."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gzip
import hashlib
import os
import pathlib
import platform
import shutil
import stat
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any, BinaryIO, Generic, Literal, TextIO, TypeVar, overload

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


V = TypeVar("V", int, float, str)


class ContextVar(Generic[V]):
    """A named knob of the type of its default (int, float or str, as tinygrad's: `ContextVar("BENCHMARK_LOG", "")`),
    initialised from the environment and overridable with `Context`."""

    registry: dict[str, ContextVar[Any]] = {}

    def __init__(self, key: str, default: V):
        self.key = key
        kind = type(default)
        raw = os.environ.get(key)
        try:
            self.value: V = default if raw is None else kind(raw)
        except ValueError:
            article = "an" if kind.__name__[0] in "aeiou" else "a"
            raise ValueError(f"the environment variable {key}={raw!r} is not {article} {kind.__name__}, which {key} "
                             f"takes (its default is {default!r})") from None
        ContextVar.registry[key] = self

    def __reduce__(self) -> tuple:
        # the value it has now (inside a Context, the Context's); loading neither reads the environment nor replaces
        # the live knob of that name in the registry. A knob whose value is computed (a property) loads as a plain
        # ContextVar holding that value
        kind = ContextVar if isinstance(getattr(type(self), "value", None), property) else type(self)
        return _context_var_from_pickle, (kind, self.key, self.value)

    def __bool__(self) -> bool:
        return bool(self.value)

    def __ge__(self, other: V) -> bool:
        return self.value >= other

    def __gt__(self, other: V) -> bool:
        return self.value > other

    def __le__(self, other: V) -> bool:
        return self.value <= other

    def __lt__(self, other: V) -> bool:
        return self.value < other

    def __int__(self) -> int:
        return int(self.value)

    def __eq__(self, other: object) -> bool:
        # `DEBUG == 2` compares the value, as tinygrad's ContextVar does; two knobs are equal only if they are one
        return self is other if isinstance(other, ContextVar) else self.value == other

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"ContextVar({self.key}={self.value})"

    def tolist(self, obj: Any = None) -> list[Any]:
        """A comma-separated string knob's entries, each looked up as an attribute of `obj` when one is given
        (tinygrad's `EMULATED_DTYPES.tolist(dtypes)`)."""
        if not isinstance(self.value, str):
            raise TypeError(f"{self.key} is not a list knob: its value {self.value!r} is not a string")
        return [getattr(obj, x) if obj is not None else x for x in self.value.split(",") if x]



def _context_var_from_pickle(kind: type[ContextVar[Any]], key: str, value: Any) -> ContextVar[Any]:
    """ContextVar.__reduce__'s inverse: a knob named `key` holding `value`, outside the registry."""
    var: ContextVar[Any] = object.__new__(kind)
    var.key, var.value = key, value
    return var


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
#: tinygrad's switch for every on-disk cache: 0 neither reads nor writes one (compiled kernels, BEAM choices)
CACHELEVEL = ContextVar("CACHELEVEL", 2)
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
#: EMULATED_DTYPES=half,long (tinygrad's knob, a list of dtype names): the dtypes tinygrad's compiler lowers to
#: others. Here each backend's renderer decides what it emulates (bfloat16 and the 8-bit floats always are, as
#: float32), so the knob is read by code that asks about it (`EMULATED_DTYPES.tolist(dtypes)`) and changes no kernel
EMULATED_DTYPES = ContextVar("EMULATED_DTYPES", "")


@dataclasses.dataclass(frozen=True)
class Target:
    """One entry of DEV, in tinygrad's syntax `[interface[:indices]+]device[:renderer[:arch]]`: `CPU`, `CPU:LLVM`,
    `CPU:CLANG`, `CL`. The device part picks `Device.DEFAULT`; the backend named reads its renderer and arch
    (`DEV.target("CPU").renderer`), and refuses one it does not have. As an exception kept for this project's
    users, a number after the device (`DEV=CPU:1`) is a device index, not a renderer."""

    device: str = ""
    renderer: str = ""
    arch: str = ""
    interface: str = ""
    indices: str = ""

    @staticmethod
    def parse(text: str) -> Target:
        interface = indices = ""
        if "+" in text:
            head, _, text = text.partition("+")
            if "+" in text:
                raise ValueError(f"DEV entry {text!r}: more than one '+'; the form is [interface[:indices]+]device"
                                 f"[:renderer[:arch]]")
            interface, _, indices = head.partition(":")
        parts = text.split(":")
        if len(parts) > 3:
            raise ValueError(f"DEV entry {text!r}: more than two ':'; the form is device[:renderer[:arch]], as in "
                             f"CPU:LLVM")
        parts += [""] * (3 - len(parts))
        return Target(parts[0].upper(), parts[1].upper(), parts[2], interface, indices)

    def __repr__(self) -> str:
        front = ":".join(p for p in (self.interface, self.indices) if p)
        back = ":".join([self.device, self.renderer, self.arch]).rstrip(":")
        return f"{front}+{back}" if front else back


class _DevTargets(ContextVar[str]):
    """DEV: which device tensors go to by default, and optionally its renderer (`DEV=CPU:LLVM`); several entries
    separated by ';' each name one device's choices (`DEV=CPU:CLANG;CL`), the first is the default. `DEV.device`,
    `DEV.renderer`, `DEV.arch` read the first entry, as tinygrad's do."""

    @property
    def targets(self) -> list[Target]:
        return [Target.parse(t) for t in self.value.split(";") if t.strip()] or [Target()]

    def __getattr__(self, name: str) -> Any:
        if name in ("device", "renderer", "arch", "interface", "indices"):
            return getattr(self.targets[0], name)
        raise AttributeError(f"DEV has no attribute {name!r}")

    def target(self, device: str) -> Target:
        """The entry for `device` (an entry without a device applies to all), or a bare Target of that device."""
        device = device.partition(":")[0].upper()
        found = next((t for t in self.targets if t.device in ("", device)), Target(device))
        return dataclasses.replace(found, device=device)

    def __repr__(self) -> str:
        return ";".join(repr(t) for t in self.targets)


#: DEV=device[:renderer[:arch]]: the default device and its renderer (tinygrad's syntax; Target)
DEV = _DevTargets("DEV", "")
#: IMAGE=1 in tinygrad uses image (texture) buffers for some convolutions; this project has none, so it stays 0
IMAGE = ContextVar("IMAGE", 0)


class Context(contextlib.ContextDecorator):
    """Temporarily set knobs: `with Context(DEBUG=2): ...`."""

    def __init__(self, **kwargs: Any):
        unknown = [k for k in kwargs if k not in ContextVar.registry]
        if unknown:
            raise KeyError(f"unknown Context variable(s) {unknown}; known ones are {sorted(ContextVar.registry)}")
        self.kwargs = kwargs
        self.saved: dict[str, Any] = {}

    def __enter__(self) -> Context:
        for k, v in self.kwargs.items():
            var = ContextVar.registry[k]
            self.saved[k] = var.value
            var.value = type(var.value)(v)  # the knob's own type: Context(DEBUG=True) is DEBUG=1
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
# renamed into place, so concurrent writers and readers only ever see whole entries.
# Nothing in the cache folder is trusted: a file there may have been copied from another entry, renamed, cut short,
# or replaced by a pipe or a device. So an entry is a record bound to its table and key (a SHA-256 of both, in its
# header and in its checksum; callers put what the value was built from, such as a kernel's source, in the key), and
# a read only opens a regular file, without blocking, and reads at most a bounded size. An entry that fails any check
# is a miss: the caller rebuilds it and its put overwrites the file.

_disk_cache_warned: set[str] = set()
_disk_cache_skipped: set[str] = set()
#: the largest value an entry may hold; a larger file where an entry belongs is a miss and is never read whole
DISK_CACHE_MAX_VALUE_BYTES = 256 << 20
#: the first word of every entry: the record's format and its version (entries of another format are misses)
_DISK_CACHE_FORMAT = b"tinygrad-cache-1"
#: room for the header line ahead of the value: format, key digest, checksum, length
_DISK_CACHE_HEADER_BYTES = 256


def disk_cache_path(table: str, key: str, suffix: str = ".bin") -> pathlib.Path:
    """The file of `key` in `table`: `cache_dir()/table/<sha256 of key><suffix>`."""
    return cache_dir() / table / f"{hashlib.sha256(key.encode()).hexdigest()}{suffix}"


def _disk_cache_binding(table: str, key: str) -> bytes:
    return hashlib.sha256(f"{table}\0{key}".encode()).hexdigest().encode()


def _disk_cache_checksum(binding: bytes, length: bytes, value: bytes) -> bytes:
    h = hashlib.sha256(binding)  # the key is inside the checksum: a value cannot be served under another key
    h.update(b" " + length + b" ")
    h.update(value)
    return h.hexdigest().encode()


def _read_regular_file(path: pathlib.Path, limit: int) -> bytes | str:
    """The bytes of the regular file at `path`, or why they were not read (not a regular file, more than `limit`
    bytes). Raises OSError when it cannot be opened or read."""
    # a pipe or a device is not even opened (opening one can block or have effects); the open is non-blocking and
    # checked again, in case the path was swapped for one after the stat
    if not stat.S_ISREG(os.stat(path).st_mode):
        return "not a regular file"
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        if st.st_size > limit:
            return f"larger than {limit} bytes"
        data = f.read(st.st_size + 1)  # a file that grew since the fstat reads long and fails the entry's length check
    return data


def _disk_cache_unpack(record: bytes, binding: bytes) -> bytes | str:
    """The value of an entry `record` written under `binding`, or why it cannot be served."""
    end = record.find(b"\n", 0, _DISK_CACHE_HEADER_BYTES)
    fields = record[:end].split(b" ") if end >= 0 else []
    if len(fields) != 4 or fields[0] != _DISK_CACHE_FORMAT:
        return "not an entry of this format"
    _, bound_to, checksum, length = fields
    if bound_to != binding:
        return "written for another key"
    value = record[end + 1:]
    if not length.isdigit() or int(length) != len(value):
        return "truncated or extended"
    if len(value) > DISK_CACHE_MAX_VALUE_BYTES:
        return f"larger than {DISK_CACHE_MAX_VALUE_BYTES} bytes"
    if _disk_cache_checksum(binding, length, value) != checksum:
        return "checksum mismatch"
    return value


def disk_cache_get(table: str, key: str, suffix: str = ".bin") -> bytes | None:
    """The value stored under `key` in `table`, or None (a miss) when there is none or the entry cannot be trusted:
    not a regular file, too large, truncated, corrupt, or written for another key. DEBUG>=1 reports a skipped
    entry once."""
    if CACHELEVEL.value <= 0:
        return None
    path = disk_cache_path(table, key, suffix)
    try:
        record = _read_regular_file(path, DISK_CACHE_MAX_VALUE_BYTES + _DISK_CACHE_HEADER_BYTES)
    except OSError:
        return None
    got = record if isinstance(record, str) else _disk_cache_unpack(record, _disk_cache_binding(table, key))
    if isinstance(got, bytes):
        return got
    if DEBUG >= 1 and str(path) not in _disk_cache_skipped:
        _disk_cache_skipped.add(str(path))
        print(f"{table} cache: ignoring {path} ({got}); it is rebuilt", file=sys.stderr)
    return None


def disk_cache_put(table: str, key: str, value: bytes, suffix: str = ".bin") -> bool:
    """Store `value` under `key` in `table` atomically. Returns whether it was stored; a failure warns once. A value
    over DISK_CACHE_MAX_VALUE_BYTES is not stored (no read would serve it)."""
    if len(value) > DISK_CACHE_MAX_VALUE_BYTES or CACHELEVEL.value <= 0:
        return False
    path = disk_cache_path(table, key, suffix)
    binding, length = _disk_cache_binding(table, key), str(len(value)).encode()
    header = b" ".join((_DISK_CACHE_FORMAT, binding, _disk_cache_checksum(binding, length, value), length)) + b"\n"
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        # no fsync: an entry a crash leaves short or empty fails its checksum and is rebuilt, and compiles stay fast
        with os.fdopen(fd, "wb") as f:
            f.write(header)
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


#: where profile_marker's points go: tinygrad.engine.profile sets its recorder here when it loads (every `import
#: tinygrad` loads it). The profiler builds on this module, so this module cannot import it.
_marker_sink: Callable[[str, str], None] | None = None


def profile_marker(name: str, color: str = "gray") -> None:
    """Mark a named point in the PROFILE=1 trace (a phase of a program: "load weights", "step 3"); with PROFILE
    off it does nothing, so programs may leave their markers in."""
    if PROFILE and _marker_sink is not None:
        _marker_sink(name, color)


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


# ---- tinygrad's small helpers ----

def temp(name: str, append_user: bool = False) -> str:
    """The path of `name` in the system's temporary folder (with `.<user>` appended when asked, so that users of
    one machine do not share the file), as tinygrad's tests and examples name their scratch files."""
    if append_user:
        import getpass

        name = f"{name}.{getpass.getuser()}"
    return (pathlib.Path(tempfile.gettempdir()) / name).as_posix()


def mv_address(mv: memoryview) -> int:
    """The address of the first byte of a writable, contiguous memoryview (tinygrad's tests hand it to devices)."""
    import ctypes

    if mv.readonly:
        raise ValueError("mv_address needs a writable memoryview (a bytearray's or a numpy array's, not bytes')")
    return ctypes.addressof(ctypes.c_char.from_buffer(mv))


# ---- writing a user's file ----
# A file written for a user (a checkpoint, a trace, a report) must survive a crash at any instant. It is written to a
# temporary file in the target's folder (a rename is atomic only within one file system), forced to disk, and only
# then renamed over the target: the target is always the old file or the new one, whole, never empty or a mix.

@overload
def atomic_write(path: str | os.PathLike[str], mode: Literal["wb"] = "wb", *,
                 encoding: None = None) -> contextlib.AbstractContextManager[BinaryIO]: ...
@overload
def atomic_write(path: str | os.PathLike[str], mode: Literal["w"], *,
                 encoding: str | None = None) -> contextlib.AbstractContextManager[TextIO]: ...
def atomic_write(path: str | os.PathLike[str], mode: str = "wb", *,
                 encoding: str | None = None) -> contextlib.AbstractContextManager[IO[Any]]:
    """`with atomic_write(path) as f: f.write(...)` replaces `path` with what the block wrote, or, when the block
    raises, leaves `path` as it was and removes the temporary file.

    `mode` is "wb" or "w" (with `encoding` as `open`'s). The new file keeps the permission bits of the file it
    replaces; a new file gets those `open` would give it (0o666 less the umask). A symlink stays a symlink: the file
    it points to is replaced. A target that is not a regular file (a pipe, /dev/stdout) cannot be replaced and is
    written in place, as `open` would."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write writes a whole new file, so its mode is 'w' or 'wb', not {mode!r}")
    return _atomic_write(os.fspath(path), mode, encoding)


@contextlib.contextmanager
def _atomic_write(path: str, mode: str, encoding: str | None) -> Iterator[IO[Any]]:
    if os.path.islink(path):
        path = os.path.realpath(path)
    try:
        old_mode: int | None = os.stat(path).st_mode
    except FileNotFoundError:
        old_mode = None
    if old_mode is not None and not stat.S_ISREG(old_mode):
        with open(path, mode, encoding=encoding) as f:
            yield f
        return
    folder = os.path.dirname(path) or "."
    fd, tmp = _create_beside(folder)
    try:
        if old_mode is not None:
            os.chmod(tmp, stat.S_IMODE(old_mode))
        with _open_fd(fd, tmp, mode, encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)


def _create_beside(folder: str) -> tuple[int, str]:
    """A new, empty hidden file in `folder`: (its descriptor, its path). Not `tempfile.mkstemp`, which creates the file
    0o600: created with 0o666 the kernel applies the umask (and a folder's default ACL) as for any new file, and
    reading the umask from the process would briefly change it for every thread."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = os.path.join(folder, f".tmp-{os.urandom(6).hex()}")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
        except PermissionError as e:
            raise PermissionError(e.errno, f"cannot create a temporary file in {folder}: a file is saved by writing "
                                  f"a temporary file beside it and renaming that over it, so that a crash never "
                                  f"leaves half a file; make the folder writable or save somewhere else", tmp) from None
    raise FileExistsError(f"could not create a temporary file in {folder}: every name tried was taken")


def _open_fd(fd: int, name: str, mode: str, encoding: str | None) -> IO[Any]:
    """A file object on `fd` whose `.name` is `name`; `fd` is closed if no file object could be made of it."""
    handed_over = False

    def opener(_path: str, _flags: int) -> int:
        nonlocal handed_over
        handed_over = True
        return fd
    try:
        return open(name, mode, encoding=encoding, opener=opener)
    except BaseException:
        if not handed_over:  # once handed over, the failed open() has closed it already
            os.close(fd)
        raise


def _fsync_folder(folder: str) -> None:
    """Make the rename itself durable. Best effort: some systems cannot open or sync a folder."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


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
          timeout: float = 10.0, sha256: str | None = None, extract: bool = False) -> pathlib.Path:
    """A local path to the contents of `url`, as tinygrad's `fetch`.

    http(s) URLs are downloaded once into `cache_dir()/downloads[/subdir]`, under `name` or a hash of the URL (and of
    `headers`), and later calls return the cached file without touching the network (`allow_caching=False` or
    DISABLE_HTTP_CACHE=1 downloads again). A `name` with a "/" is the full destination path. `gunzip=True`
    stores the decompressed bytes. file:// URLs and plain paths are read where they are (decompressed into the
    cache with `gunzip`). A failed download raises ConnectionError naming the URL and where to put the file.

    `sha256`: the file's expected SHA-256 (hex); a cached file that does not match is downloaded again, and a
    download (or a local file) that does not match raises ValueError and is not kept. `extract=True`: the file is a
    tar archive (any compression tarfile reads), unpacked once beside it into `<file>.extract/` (members that
    would land outside it, links and devices are refused), and that folder is returned."""
    path = _fetch_file(url, name, subdir, gunzip, allow_caching, headers, timeout, sha256)
    return _extracted(path) if extract else path


def _fetch_file(url: str, name: str | pathlib.Path | None, subdir: str | None, gunzip: bool, allow_caching: bool,
                headers: dict[str, str] | None, timeout: float, sha256: str | None) -> pathlib.Path:
    if (local := _local_path(url)) is not None:
        if not local.is_file():
            raise FileNotFoundError(f"fetch({url!r}): there is no file {local}")
        if not gunzip:
            _check_sha256(local, sha256, keep=True)
            return local
    if name is not None and (isinstance(name, pathlib.Path) or "/" in name):
        dest = pathlib.Path(name)
    else:
        header_key = "\n".join(f"{k}:{v}" for k, v in sorted((headers or {}).items()))
        key = name or hashlib.sha256(url.encode()).hexdigest()[:32]
        suffix = ("_" + hashlib.sha256(header_key.encode()).hexdigest()[:16] if header_key else "") + \
            (".gunzip" if gunzip else "")
        dest = downloads_dir() / (subdir or "") / f"{key}{suffix}"
    if dest.is_file() and allow_caching and (sha256 is None or _sha256_of(dest) == sha256.lower()):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    if local is not None:
        with gzip.open(local, "rb") as src:
            return _check_sha256(_save(src, dest, None, f"{local}"), sha256)
    request = urllib.request.Request(url, headers={"User-Agent": "tinygrad", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            length = int(response.headers.get("content-length") or 0) or None
            if gunzip:
                with gzip.GzipFile(fileobj=response) as src:
                    return _check_sha256(_save(src, dest, None, url), sha256)
            return _check_sha256(_save(response, dest, length, url), sha256)
    except OSError as e:  # URLError, HTTPError, timeouts and refused connections are all OSErrors
        reason = getattr(e, "reason", None) or e
        raise ConnectionError(f"fetch could not download {url}: {reason}. Check the URL and the network, or put the "
                              f"file at {dest} (fetch reads it from there)") from e


def _sha256_of(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _check_sha256(path: pathlib.Path, sha256: str | None, keep: bool = False) -> pathlib.Path:
    """`path` if its SHA-256 is `sha256` (or none is asked for); else ValueError, and a downloaded file is removed
    (`keep`: a user's own file is never removed)."""
    if sha256 is not None and (got := _sha256_of(path)) != sha256.lower():
        if not keep:
            path.unlink(missing_ok=True)
        raise ValueError(f"{path}: SHA-256 {got}, expected {sha256.lower()}" +
                         ("" if keep else "; the file was removed, fetch downloads it again next time"))
    return path


def _extracted(archive: pathlib.Path) -> pathlib.Path:
    """The folder `archive` (a tar file) is unpacked into, beside it; unpacked once, into a temporary folder renamed
    into place, so that a reader never sees half of it."""
    import shutil
    import tarfile
    import tempfile

    target = archive.parent / f"{archive.name}.extract"
    if target.is_dir():
        return target
    staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{archive.name}.", dir=archive.parent))
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")  # "data": no absolute paths, no '..', no links outside, no devices
        try:
            os.rename(staging, target)
        except OSError:
            if not target.is_dir():  # not a concurrent fetch that finished first
                raise
    except tarfile.FilterError as e:
        raise ValueError(f"fetch(extract=True): {archive} has a member that is refused: {e}") from e
    except tarfile.TarError as e:
        raise ValueError(f"fetch(extract=True): {archive} is not a tar archive this Python can read ({e})") from e
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _save(src: Any, dest: pathlib.Path, length: int | None, what: str) -> pathlib.Path:
    """Stream `src` into `dest` through `atomic_write`, so that an interrupted download never leaves a partial file
    that the next call would take for the cached one."""
    bar: tqdm[Any] = tqdm(total=length, unit="B", unit_scale=True, desc=what, disable=CI or not sys.stderr.isatty())
    try:
        with atomic_write(dest) as out:
            while chunk := src.read(1 << 16):
                bar.update(out.write(chunk))
            written = out.tell()
            if length is not None and written < length:
                raise ConnectionError(f"fetch of {what} stopped after {written} of {length} bytes; try again")
    finally:
        bar.close()
    return dest


#: FUSE_OPTIM=1 in tinygrad lays an optimizer's state out in one fused buffer; the updates' values are the same, so
#: here it is a knob that Context and the environment accept and that changes nothing
FUSE_OPTIM = ContextVar("FUSE_OPTIM", 0)


class _DefaultFloat(ContextVar[str]):
    """DEFAULT_FLOAT as a Context knob, `Context(DEFAULT_FLOAT="half")` (tinygrad's spelling): its value is the name of
    `dtypes.default_float`, the dtype of Python floats, and setting it sets that dtype. (The environment variable is
    read by tinygrad.dtype at import; this module cannot import tinygrad.dtype at its own import.)"""

    def __init__(self) -> None:  # no environment read here: see above
        self.key = "DEFAULT_FLOAT"
        ContextVar.registry[self.key] = self

    @property  # type: ignore[override]
    def value(self) -> str:
        from tinygrad.dtype import dtypes
        return dtypes.default_float.name

    @value.setter
    def value(self, name: str) -> None:
        from tinygrad.dtype import dtypes, to_dtype
        # Context converts a value to the knob's type: a DType given (`Context(DEFAULT_FLOAT=dtypes.half)`, as
        # tinygrad's tests do) arrives as its repr, "dtypes.float16"
        d = to_dtype(str(name).lower().removeprefix("dtypes."))
        if not d.is_float:
            raise ValueError(f"DEFAULT_FLOAT={name!r} is not a float dtype")
        dtypes.default_float = d


DEFAULT_FLOAT = _DefaultFloat()
