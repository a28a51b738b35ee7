"""The stand-in device of compile-only mode, and the record of what it compiled.

`CompileOnlyDevice` is a `Compiled` device made of a backend's renderer and compiler for one target (from its
`tinygrad_compile_only` hook, see `compile_only`), memory that holds nothing, and programs that do nothing. Every
kernel a test launches on it is rendered and compiled for the target, exactly as the device would build it; then
nothing runs. Reading a result back (every read goes through the allocator's `copyout`: `numpy()`, `item()`,
`.to("CPU")`) skips the test with `RESULTS_NOT_CHECKED`, so a check builds all its kernels and stops where it
would compare values. A kernel that fails to render or compile raises as it would on the device, and the failure
is recorded with the kernel's name, the compiler's message and an excerpt of the source.

The records (`KernelRecord`) are kept per process and drained after each test phase; the kit's plugin carries
them to the controller on the test reports (xdist), where `CompileOutcomes` counts the distinct kernels and
lists the failures.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tinygrad.codegen import ProgramSpec
from tinygrad.codegen.index_dtype import IndexRangeError
from tinygrad.conformance.compile_only import CompileOnlyBackend, compile_only_backends, describe_missing
from tinygrad.device import CONTRACT_VERSION, Allocator, BackendInfo, Device
from tinygrad.dtype import dtypes
from tinygrad.runtime.device import Compiled
from tinygrad.uop.ops import UOp

#: the skip reason of a check that would read a result back from the stand-in
RESULTS_NOT_CHECKED = ("compile-only mode (--tg-compile-only): {device} is absent, so no kernel runs and no result "
                       "is checked; this check's kernels were rendered and compiled for {target}")
#: the priority of the stand-in's BackendInfo: never Device.DEFAULT unless DEV names it
STANDIN_PRIORITY = 20000
#: longest compiler message kept per failure
MESSAGE_CHARS = 4000


@dataclass(frozen=True)
class KernelRecord:
    """One kernel's outcome: stage "ok", "render" (the renderer or a compiler pass refused it) or "compile"."""

    target: str
    kernel: str  # the kernel's name ("r_13_257"), or "(not rendered)"
    key: str  # a digest of the source (of the error, for a kernel that was not rendered)
    stage: str
    message: str = ""  # the compiler's message, without the source
    excerpt: str = ""  # the source lines the message points at (or its first lines), numbered
    test: str = ""  # the test that built it (set by the plugin)

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, str]) -> KernelRecord:
        return cls(**{k: str(v) for k, v in d.items() if k in cls.__dataclass_fields__})


_LOG: list[KernelRecord] = []
_LOCK = threading.Lock()  # compiles of one schedule run in threads (Compiled.precompile)


def _log(record: KernelRecord) -> None:
    with _LOCK:
        _LOG.append(record)


def drain() -> list[KernelRecord]:
    """The records made in this process since the last call."""
    with _LOCK:
        out = list(_LOG)
        _LOG.clear()
    return out


#: where a compiler's message names a source line: NVRTC's "kernel.cu(12): error", clang's "k.hip:12:5: error"
_LINE_REFS = (re.compile(r"\((\d+)\): (?:catastrophic )?error"), re.compile(r":(\d+):\d+: (?:fatal )?error"))
_SOURCE_MARKER = re.compile(r"^-+ *source *-+$")


def compiler_message(err: BaseException, src: str) -> str:
    """The error's text without the kernel source that compilers' errors often repeat (the excerpt shows it)."""
    msg = str(err)
    if src and src.strip() and src.strip() in msg:
        msg = msg.replace(src.strip(), "")
    lines = [line for line in msg.splitlines() if not _SOURCE_MARKER.match(line.strip())]
    text = "\n".join(lines).strip() or type(err).__name__
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + f"\n... ({len(text)} characters)"


def source_excerpt(src: str, message: str, context: int = 3, head: int = 12) -> str:
    """The numbered source lines around the first line the message names, else the first `head` lines."""
    lines = src.splitlines()
    for pattern in _LINE_REFS:
        if (m := pattern.search(message)) is not None and 1 <= int(m.group(1)) <= len(lines):
            n = int(m.group(1))
            lo, hi = max(1, n - context), min(len(lines), n + context)
            return "\n".join(f"{'>' if i == n else ' '}{i:5d} | {lines[i - 1]}" for i in range(lo, hi + 1))
    shown = "\n".join(f" {i:5d} | {line}" for i, line in enumerate(lines[:head], 1))
    return shown + (f"\n  ... ({len(lines)} lines)" if len(lines) > head else "")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class _Nothing:
    """The 'memory' of a stand-in buffer: its size, no bytes."""

    __slots__ = ("nbytes",)

    def __init__(self, nbytes: int):
        self.nbytes = nbytes


class NoMemory(Allocator):
    """Takes uploads and drops them (kernels get inputs, nothing is stored); a read back skips the test."""

    def __init__(self, device: str, target: str):
        self.device, self.target = device, target

    def alloc(self, nbytes: int) -> _Nothing:
        return _Nothing(nbytes)

    def free(self, opaque: Any, nbytes: int) -> None:
        pass

    def copyin(self, dest: Any, src: memoryview) -> None:
        pass

    def copyout(self, dest: memoryview, src: Any) -> None:
        import pytest  # only a test under the kit's plugin reads from a stand-in

        pytest.skip(RESULTS_NOT_CHECKED.format(device=self.device, target=self.target))


class _NotRun:
    """A compiled kernel's program on the stand-in: launching it does nothing."""

    def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None:
        return 0.0


def _not_run(spec: ProgramSpec, lib: bytes) -> _NotRun:
    return _NotRun()


class CompileOnlyDevice(Compiled):
    """A backend's renderer and compiler for one target, with no device behind them (see the module's docstring)."""

    def __init__(self, name: str, backend: CompileOnlyBackend, target: str):
        renderer, compiler = backend.make(target)
        super().__init__(name, NoMemory(name, target), renderer, compiler, _not_run)
        self.backend, self.target = backend, target

    def _refused_dtype(self, ast: UOp) -> bool:
        # what Compiled._program refuses with a TypeError: the contract's answer to an unclaimed dtype, not a finding
        return any(u.dtype.kind != "void" and u.dtype != dtypes.index and not self.renderer.supports_dtype(u.dtype)
                   for u in ast.toposort())

    def _program(self, ast: UOp) -> ProgramSpec:
        if self._refused_dtype(ast):
            return super()._program(ast)
        try:
            return super()._program(ast)
        except IndexRangeError:  # an index past what the target computes in: refused as the contract says
            raise
        except Exception as e:
            message = f"{type(e).__name__}: {e}"
            _log(KernelRecord(self.target, "(not rendered)", _digest(message), "render",
                              message[:MESSAGE_CHARS], _ast_excerpt(ast)))
            raise

    def _compile(self, spec: ProgramSpec) -> bytes:
        try:
            lib = super()._compile(spec)
        except Exception as e:
            message = compiler_message(e, spec.src)
            _log(KernelRecord(self.target, spec.name, _digest(spec.src), "compile", message,
                              source_excerpt(spec.src, message)))
            raise
        _log(KernelRecord(self.target, spec.name, _digest(spec.src), "ok"))
        return lib


def _ast_excerpt(ast: UOp, head: int = 12) -> str:
    text = str(ast).splitlines()
    return "\n".join(text[:head]) + (f"\n... ({len(text)} lines)" if len(text) > head else "")


def standin_info(name: str, backend: CompileOnlyBackend, target: str) -> BackendInfo:
    """The `BackendInfo` that makes device `name` the stand-in (package and contract version from the backend)."""
    real = Device.backends.get(name.upper())

    def open_standin(index: int) -> CompileOnlyDevice:
        return CompileOnlyDevice(name if index == 0 else f"{name}:{index}", backend, target)

    return BackendInfo(
        name=name, contract_version=real.contract_version if real is not None else CONTRACT_VERSION,
        open=open_standin, check=backend.check, priority=STANDIN_PRIORITY,
        description=f"compile-only stand-in for {name}, target {target}: kernels are rendered and compiled, "
                    f"none runs", note=lambda: f"compile-only (target {target})",
        package=backend.package or (real.package if real is not None else ""),
        version=backend.version or (real.version if real is not None else ""))


def install_standin(name: str, backend: CompileOnlyBackend, target: str) -> None:
    """Make device `name` (and `name:N`) the stand-in in this process, in place of the real backend."""
    Device.unregister(name)
    Device.register(standin_info(name, backend, target), source="tinygrad.conformance (compile-only)")


@contextlib.contextmanager
def standin_device(backend: str | CompileOnlyBackend, target: str, name: str | None = None) -> Iterator[str]:
    """A stand-in for `backend` (its device name, or its `CompileOnlyBackend`) compiling for `target`, registered as
    device `name` (default "CUDA_SM_90" for CUDA and sm_90, beside the real device) while the block runs; yields
    the name. For a backend's own tests: `Device[name].get_runner(ast)` builds a kernel for the target."""
    if isinstance(backend, str):
        found = compile_only_backends().get(backend.upper())
        if found is None:
            raise ValueError(describe_missing(backend.upper()))
        backend = found
    name = (name or f"{backend.name}_{target}").upper()
    install_standin(name, backend, target)
    try:
        yield name
    finally:
        Device.unregister(name)


@dataclass
class CompileOutcomes:
    """The distinct kernels of a run (by source) and the ones that failed, gathered from every process."""

    target: str
    compiled: set[str] = field(default_factory=set)  # keys of kernels that compiled
    failures: dict[str, KernelRecord] = field(default_factory=dict)  # key -> the first record of a failure
    tests: dict[str, list[str]] = field(default_factory=dict)  # failure key -> the tests that hit it

    def add(self, records: Sequence[KernelRecord]) -> None:
        for r in records:
            if r.stage == "ok":
                self.compiled.add(r.key)
                continue
            self.failures.setdefault(r.key, r)
            hits = self.tests.setdefault(r.key, [])
            if r.test and r.test not in hits:
                hits.append(r.test)

    @property
    def failed(self) -> int:
        return len(self.failures)

    def summary(self, device: str) -> str:
        rendered = sum(1 for r in self.failures.values() if r.stage == "render")
        compiled = len(self.failures) - rendered
        return (f"compile-only {device} {self.target}: {len(self.compiled)} kernels rendered and compiled, "
                f"{compiled} failed to compile, {rendered} failed to render")

    def failure_lines(self, shown: int = 20) -> list[str]:
        out: list[str] = []
        for i, (key, r) in enumerate(sorted(self.failures.items(), key=lambda kv: (kv[1].stage, kv[1].kernel))):
            if i == shown:
                out.append(f"... and {len(self.failures) - shown} more failures (all of them in --tg-report's JSON)")
                break
            tests = self.tests.get(key, [])
            where = f" in {tests[0]}" + (f" and {len(tests) - 1} more tests" if len(tests) > 1 else "") if tests else ""
            verb = "failed to compile" if r.stage == "compile" else "failed to render"
            out.append(f"{r.kernel} {verb} for {r.target}{where}:")
            out += [f"    {line}" for line in r.message.splitlines()[:25]]
            if r.excerpt:
                out.append("  source:" if r.stage == "compile" else "  kernel AST:")
                out += [f"    {line}" for line in r.excerpt.splitlines()]
        return out

    def as_json(self) -> dict[str, Any]:
        return {"target": self.target, "kernels_compiled": len(self.compiled),
                "failures": [{**r.to_json(), "tests": self.tests.get(k, [])} for k, r in sorted(self.failures.items())]}


def encode(records: Sequence[KernelRecord]) -> str:
    return json.dumps([r.to_json() for r in records])


def decode(text: str) -> list[KernelRecord]:
    return [KernelRecord.from_json(d) for d in json.loads(text)]
