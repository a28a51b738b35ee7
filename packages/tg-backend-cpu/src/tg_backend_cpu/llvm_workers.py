"""Worker processes for the LLVM path: a batch of kernels (a training step's first schedule) compiles on every core.

llvmlite guards every call into LLVM with one process-wide lock, so threads compile one kernel at a time. For a
batch, `Compiled.precompile` asks the compiler to expect it (`LLVMCompiler.expect_batch`), which starts these
workers: this file run as a script, each a loop that reads LLVM IR on stdin and writes the object file (or LLVM's
complaint) on stdout, compiled by the same code as in process (`optimized_module`, which `LLVMCompiler` calls too).
They are plain subprocesses rather than `multiprocessing` ones, which would import the user's main module again in
each worker. The file imports nothing but the standard library and llvmlite, and runs by its path, not as
`-m tg_backend_cpu.llvm_workers`: importing the package would import tinygrad, several times the cost of the
worker's own start, paid on the same cores that are rendering the batch's first kernels.
A worker that cannot start or dies leaves the kernel to the in-process compiler; the workers exit when this
process closes their stdin (at exit) or dies.

Messages: a request is an 8-byte little-endian length and the IR as UTF-8; a reply is one status byte (0: the
object follows, 1: a compile error's message follows) and an 8-byte length and the payload.
"""

from __future__ import annotations

import atexit
import os
import queue
import struct
import subprocess
import sys
import threading
from types import ModuleType
from typing import IO

OK, ERROR = 0, 1
_LENGTH = struct.Struct("<Q")
#: no object file or message is this big: a reply that says so is garbage (the worker is dropped)
MAX_REPLY = 1 << 31


def _write(stream: IO[bytes], payload: bytes, status: int | None = None) -> None:
    head = (bytes([status]) if status is not None else b"") + _LENGTH.pack(len(payload))
    stream.write(head + payload)
    stream.flush()


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if data is None or len(data) != n:
        raise EOFError("the other side closed the pipe")
    return data


class InvalidIR(RuntimeError):
    """LLVM refused a kernel's IR; the message has LLVM's complaint and the source."""


#: LLVM options set once per process (they are process-wide: another llvmlite user in this process, numba for
#: one, sees them too). `-slp-max-vf=128`: LLVM 20 and later let the SLP vectoriser make one vector of a whole
#: register tile when its size is a whole number of registers, and a tile of 160 accumulators (32 channels times
#: a 5-wide kernel row: the MNIST example's first weight gradient) became one <160 x float> that x86 code generation
#: spilled and rebuilt lane by lane on every iteration, ten times slower than vectors of 128 and 32, which is what
#: the cap gives (CHANGELOG). `-dse-memoryssa-walklimit=10`: dead store elimination walked (90 steps by default) from
#: each of a register tile's hundreds of output stores past all the others, a quarter of the compile time of a large
#: tile, and never found a dead store: the renderer writes none (each output element is stored once, accumulators
#: live in registers once promoted), so the kernels compile to the same bytes with the shorter walk.
LLVM_OPTIONS = ("-slp-max-vf=128", "-dse-memoryssa-walklimit=10")
_options_set = False


def initialize(llvm: ModuleType) -> None:
    global _options_set
    # LLVM's core initialises itself in llvmlite 0.45 and later; the native target and its printer do not
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    if not _options_set:
        for option in LLVM_OPTIONS:
            llvm.set_option("tinygrad", option)
        _options_set = True


#: x86 tuning added to the host's features: vectorisers that find strided loads (a 2x2 pool's stride-2 rows, a padded
#: convolution's window) build them from gather instructions, which AMD's Zen cores and Intel's with the Downfall
#: microcode fix run many times slower than the loads and shuffles LLVM uses instead (CHANGELOG); clang's
#: -mno-gather/-mno-scatter, which the C path passes, set the same two
X86_TUNING = ("+prefer-no-gather", "+prefer-no-scatter")


def host_features(llvm: ModuleType) -> str:
    """The host CPU's features as LLVM spells them, with `X86_TUNING` on x86."""
    features = llvm.get_host_cpu_features().flatten()
    if llvm.get_process_triple().startswith(("x86_64", "i386", "i686")):
        features = ",".join(filter(None, [features, *X86_TUNING]))
    return features


def host_target_machine(llvm: ModuleType):  # type: ignore[no-untyped-def]
    """A target machine for this host's CPU and features. The large code model: the loader places code and
    constants wherever it allocates them, possibly more than 2 GiB apart, which 32-bit offsets cannot reach."""
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=host_features(llvm),
                                        opt=2, reloc="default", codemodel="jitdefault", jit=True)


#: what `optimized_module` runs, for the compile cache's key: it must change whenever the pipeline does
PIPELINE = "O2 slp no-unroll"


def optimized_module(llvm: ModuleType, target_machine, src: str):  # type: ignore[no-untyped-def]
    """The IR parsed, checked and through the O2 pipeline (`PIPELINE`) for `target_machine` (one thread at a time:
    llvmlite is not safe to call concurrently). Raises InvalidIR."""
    try:
        module = llvm.parse_assembly(src)
        module.verify()
    except RuntimeError as e:
        raise InvalidIR(f"LLVM rejected a kernel's IR:\n{e}\n--- source ---\n{src}") from e
    module.triple = target_machine.triple
    module.data_layout = str(target_machine.target_data)
    tuning = llvm.create_pipeline_tuning_options(speed_level=2)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True  # off at O2 by default in llvmlite; clang -O2 runs it
    # no loop unroller: the kernel optimisations unroll (UPCAST, UNROLL) where it pays, and LLVM's unroller copied
    # the loops around their register tiles again, which every later pass then paid for without the kernels running
    # faster (CHANGELOG); the loop vectoriser still interleaves the loops it vectorises
    tuning.loop_unrolling = False
    builder = llvm.create_pass_builder(target_machine, tuning)
    builder.getModulePassManager().run(module, builder)
    return module


class WorkerDied(RuntimeError):
    """A worker process ended or broke the protocol: the caller compiles the kernel in process."""


class _Worker:
    def __init__(self) -> None:
        # -P: the script's folder (this package's) does not go first on sys.path, where its modules could shadow
        # the standard library's
        self.proc = subprocess.Popen([sys.executable, "-P", os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def compile(self, src: str) -> tuple[int, bytes]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            _write(self.proc.stdin, src.encode())
            status = _read_exact(self.proc.stdout, 1)[0]
            (size,) = _LENGTH.unpack(_read_exact(self.proc.stdout, _LENGTH.size))
            if status not in (OK, ERROR) or size > MAX_REPLY:
                raise ValueError(f"a reply that is not one (status {status}, {size} bytes)")
            return status, _read_exact(self.proc.stdout, size)
        except (OSError, EOFError, ValueError) as e:
            raise WorkerDied(f"LLVM compile worker {self.proc.pid} stopped: {e}") from e

    def close(self) -> None:
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class CompileWorkers:
    """`count` worker processes; `compile(src)` takes an idle one (waiting for one if all are busy)."""

    def __init__(self, count: int):
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all = [_Worker() for _ in range(count)]
        for w in self._all:
            self._idle.put(w)
        self.alive = count
        self._lock = threading.Lock()
        atexit.register(self.close)

    def compile(self, src: str) -> tuple[int, bytes]:
        """(OK, object bytes) or (ERROR, LLVM's message); raises WorkerDied when no worker is left or the one
        taken dies (it is not given back)."""
        while True:
            with self._lock:
                if self.alive == 0:
                    raise WorkerDied("no LLVM compile worker is running")
            try:
                worker = self._idle.get(timeout=0.5)  # looked at again: the busy ones may all die meanwhile
                break
            except queue.Empty:
                continue
        try:
            result = worker.compile(src)
        except WorkerDied:
            with self._lock:
                self.alive -= 1
            worker.close()
            raise
        self._idle.put(worker)
        return result

    def close(self) -> None:
        for w in self._all:
            w.close()
        self._all = []


def main() -> None:
    """The worker loop: IR in, object file or error out, until stdin closes."""
    # replies go to the original stdout; anything else printed (an import's warning) goes to stderr instead
    stdout = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    import llvmlite.binding as llvm

    initialize(llvm)
    target_machine = host_target_machine(llvm)
    stdin = sys.stdin.buffer
    while True:
        try:
            (size,) = _LENGTH.unpack(_read_exact(stdin, _LENGTH.size))
            src = _read_exact(stdin, size).decode()
        except EOFError:
            return
        try:
            _write(stdout, bytes(target_machine.emit_object(optimized_module(llvm, target_machine, src))), OK)
        except InvalidIR as e:
            _write(stdout, str(e).encode(), ERROR)


if __name__ == "__main__":
    main()
