"""Choosing how CPU kernels are built (LLVM in process by default, or a C compiler), and finding and driving the C
compiler: clang or gcc, or whatever `CC` names."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile

from tinygrad.errors import CompileError
from tinygrad.helpers import DEV
from tinygrad.runtime.compiler import Compiler

# the C compilers looked for when the C path is taken (CPU_COMPILER=clang or gcc, or no llvmlite): clang first,
# whose code is the closer to the LLVM path's. clang older than 15 cannot compile _Float16 on x86: passed over.
CANDIDATES = ("clang", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "gcc", "cc")
MIN_CLANG = 15

#: which compiler builds kernels: "llvm" (llvmlite, in process: llvm_compiler.py), "clang" or "gcc"; unset, LLVM
#: (a C compiler only where `CC` is set, or where llvmlite cannot be imported)
COMPILER_ENV = "CPU_COMPILER"
COMPILER_CHOICES = ("llvm", "clang", "gcc")


def compiler_choice() -> str | None:
    """$CPU_COMPILER, else the renderer of DEV's CPU entry (tinygrad's `DEV=CPU:LLVM`, `DEV=CPU:CLANG`), checked;
    None when neither is set."""
    value = os.environ.get(COMPILER_ENV, "").strip().lower()
    if value:
        if value not in COMPILER_CHOICES:
            raise ValueError(f"{COMPILER_ENV}={value!r} is not one of {', '.join(COMPILER_CHOICES)}; unset it for "
                             f"the default (llvm)")
        return value
    renderer = DEV.target("CPU").renderer.lower()
    if renderer and not renderer.isdigit():  # DEV=CPU:1 names a device, not a renderer
        if renderer not in COMPILER_CHOICES:
            raise ValueError(f"DEV asks the CPU for the renderer {renderer.upper()!r}, which it does not have; it "
                             f"has {', '.join(c.upper() for c in COMPILER_CHOICES)} (DEV=CPU:LLVM)")
        return renderer
    return None


def uses_llvm() -> bool:
    """Whether kernels take the LLVM path (llvmlite, in process): the default. The C path instead where
    CPU_COMPILER or DEV asks for clang or gcc, where `CC` names a C compiler (and CPU_COMPILER does not say llvm),
    or where llvmlite cannot be imported (a platform it has no wheel for: `llvmlite_problem` says why)."""
    choice = compiler_choice()
    if choice is not None:
        return choice == "llvm"
    if os.environ.get("CC"):
        return False
    return llvmlite_problem() is None


@functools.cache
def llvmlite_problem() -> str | None:
    """None where llvmlite imports; else why not, with the fix (the CPU then falls back to a C compiler)."""
    try:
        import llvmlite.binding  # noqa: F401
    except Exception as e:  # ImportError, or a wheel whose shared library does not load here (OSError)
        return (f"llvmlite, a dependency of tg-backend-cpu, cannot be imported ({type(e).__name__}: {e}); "
                f"`pip install llvmlite==0.50.0`, or where it has no wheel for this platform, install clang >= 15")
    return None


@functools.cache
def compiler_version(path: str) -> str:
    """The version number a C compiler prints first (`14.2.0`, `19.1.7`), or "unknown"."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    m = re.search(r"\d+\.\d+(\.\d+)?", out.split("\n", 1)[0])
    return m.group(0) if m else "unknown"


@functools.cache
def host_vector_bits() -> int | None:
    """The widest SIMD registers of this CPU, in bits (from /proc/cpuinfo's flags), or None where unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next((line for line in f if line.startswith(("flags", "Features"))), "").split())
    except OSError:
        return None
    for flag, bits in (("avx512f", 512), ("avx2", 256), ("avx", 256), ("sse2", 128), ("asimd", 128)):
        if flag in flags:
            return bits
    return None


@functools.cache
def host_fma_chains() -> int:
    """Vector multiply-adds in flight that keep this CPU's FMA units busy (their latency times their number), which
    a convolution's register tile needs twice over (`opt_rules._grow`): 8 on Intel cores with AVX-512 (two 512-bit
    units of 4 cycles); 4 elsewhere (AMD's Zen 4 runs a 512-bit multiply-add on both of its 256-bit units, where the
    bigger tile measured slower) and where /proc/cpuinfo does not say."""
    vendor, flags = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id") and not vendor:
                    vendor = line.split(":", 1)[-1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[-1].split())
                    break
    except OSError:
        return 4
    return 8 if vendor == "GenuineIntel" and "avx512f" in flags else 4


@functools.cache
def clang_major(path: str) -> int | None:
    """The major version of a clang, or None if `path` is not clang."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"clang version (\d+)", out)
    return int(m.group(1)) if m else None


@functools.cache
def find_c_compiler() -> tuple[str | None, str | None]:
    """(path to the compiler, None) or (None, why none was found)."""
    override = os.environ.get("CC")
    if override:
        path = shutil.which(override)
        if path is None:
            return None, f"CC={override} is not an executable on PATH; unset CC or point it at clang or gcc"
        return path, None
    choice = compiler_choice()
    candidates = [name for name in CANDIDATES if choice in (None, "llvm") or name.startswith(choice)]
    for name in candidates:
        if (path := shutil.which(name)) is None:
            continue
        major = clang_major(path) if "clang" in name or name == "cc" else None
        if major is not None and major < MIN_CLANG:
            continue
        return path, None
    return None, ("no C compiler found (looked for CC, then " + ", ".join(candidates) +
                  "); install one, for example `apt-get install clang` or `apt-get install gcc`" +
                  (f", or unset {COMPILER_ENV} for the LLVM path (llvmlite, no C compiler needed)"
                   if choice in ("clang", "gcc") else ""))


@functools.cache
def _cpu_signature() -> str:
    # -march=native output depends on the processor: key the cache on its feature flags too
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return platform.machine() + hashlib.sha256(flags.encode()).hexdigest()[:16]


def _accepted(path: str, flags: list[str]) -> list[str]:
    """The flags this compiler accepts (older clangs and gcc reject feature names they do not know): one run of the
    compiler when it takes them all, else one per flag."""
    def takes(tried: list[str]) -> bool:
        proc = subprocess.run([path, *tried, "-Werror", "-x", "c", "-fsyntax-only", "-"], input="",
                              capture_output=True, text=True)
        return proc.returncode == 0
    return flags if takes(flags) else [flag for flag in flags if takes([flag])]


#: gcc compiles a kernel without its loop vectoriser from this many accumulators around an innermost loop of at
#: least GCC_TILE_LOOP iterations (CCompiler._flags_for); how the C renderer declares an accumulator
#: (`float acc12 = 0.0f;`) and a loop of constant bound
GCC_TILE_ACCUMULATORS = 32
GCC_TILE_LOOP = 64
#: the first line of a C kernel that holds a byte dot (`byte_dot`; the renderer writes it, `_flags_for` reads it)
BYTE_DOT_MARKER = "/* byte dots */\n"
_ACCUMULATOR = re.compile(r"^\s*\w+ acc\d+ = ", re.M)
_CONSTANT_LOOP = re.compile(r"for \(int (\w+) = 0; \1 < (?:\(int\))?(\d+);")


def _runtime_library(path: str) -> str | None:
    """The archive of compiler support routines the driver links into every binary, if it names one."""
    proc = subprocess.run([path, "-print-libgcc-file-name"], capture_output=True, text=True)
    lib = proc.stdout.strip()
    return lib if proc.returncode == 0 and os.path.isfile(lib) else None


class CCompiler(Compiler):
    parallel = True  # each compile is its own subprocess in its own temporary directory

    def __init__(self) -> None:
        path, reason = find_c_compiler()
        if path is None:
            raise RuntimeError(reason)
        self.path = path
        version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.splitlines()
        self.version = version[0] if version else "unknown"
        self.is_clang = is_clang = "clang" in self.version.lower()
        # gcc needs -O3 to vectorise loops; clang already does at -O2
        opt = "-O2" if is_clang else "-O3"
        # gcc 12.2 at -O3 (with -march=native or x86-64-v3) vectorizes a reduction whose body holds a select on
        # a comparison wrongly once its loop if-conversion runs (seen on relu-of-matmul gradients); turning that
        # pass off keeps the results right at the cost of vectorizing loops that contain selects
        workaround = [] if is_clang else ["-fno-tree-loop-if-convert"]
        # -pthread: the thread pool (thread_pool.c) is compiled like a kernel, and glibc before 2.34 keeps
        # pthreads in a separate library
        # with AVX512-FP16 (Sapphire Rapids and later) -ffp-contract=fast fuses _Float16 multiply-adds into one
        # half-precision FMA, which rounds once where the reference semantics round after every op; without it,
        # half arithmetic is done in float and rounded at every step, as on CPUs that lack the extension
        # -mprefer-vector-width=512: clang's -march=native on AVX-512 CPUs (Sapphire Rapids, Zen 4) vectorises
        # to 256-bit registers, which halves a register tile's width and makes the 8x32 matmul tile spill
        # (the measurement is in the CHANGELOG); CPUs without AVX-512 ignore it
        # clang 18+ also turns on AVX10.1 with -march=native on such CPUs, which implies AVX512-FP16 again: the
        # AVX10.1 feature goes off too, where the compiler knows it
        # -mno-gather/-mno-scatter: vectorised strided loads (a padded convolution's window) are built from loads and
        # shuffles instead of gather instructions, which AMD's Zen cores and Intel's with the Downfall microcode fix
        # run slowly (the LLVM path sets the same tuning: llvm_workers.X86_TUNING); gcc before 12.3 has no such flag,
        # and spells it as the tuning it switches off (`use_gather`)
        x86 = ["-mno-avx512fp16", *_accepted(path, ["-mno-avx10.1-256", "-mno-gather", "-mno-scatter"] +
                                            ([] if is_clang else ["-mtune-ctrl=^use_gather"])),
               "-mprefer-vector-width=512"] \
            if platform.machine() in ("x86_64", "AMD64") else []
        self.flags = [opt, *workaround, "-march=native", *x86, "-fPIC", "-shared", "-pthread", "-fwrapv",
                      "-fno-math-errno", "-ffp-contract=fast", "-x", "c", "-std=gnu11", "-w"]
        # Linking through the compiler driver costs as much as compiling a small kernel (it finds and runs the
        # system linker with the C runtime's startup files: over half of a small kernel's build, see the
        # CHANGELOG); a kernel needs none of that, so on Linux the object goes straight to `ld -shared` (the
        # first-step compile of the MNIST example builds 100 kernels). Elsewhere, or without ld, the driver links.
        # The compiler's runtime library (libgcc: float16 <-> float64 conversions and such) is linked in, as the
        # driver would.
        self.linker = shutil.which("ld") if platform.system() == "Linux" else None
        self.runtime_lib = _runtime_library(path) if self.linker else None
        if self.runtime_lib is None:
            self.linker = None
        link = "ld" if self.linker else "driver"
        tiles = "" if is_clang else f"|tile-no-loop-vectorize>={GCC_TILE_ACCUMULATORS},{GCC_TILE_LOOP}"
        self.cache_key = f"cpu|{self.version}|{' '.join(self.flags)}{tiles}|{link}|{_cpu_signature()}"

    def _flags_for(self, src: str) -> list[str]:
        """The flags for one kernel. gcc's loop vectoriser vectorises a long innermost reduction loop around a
        register tile (a matmul's) across its iterations, with strided loads and a spilled tile, where its SLP
        vectoriser would vectorise the tile itself as clang and LLVM do: off for such kernels. Around a short loop
        (a convolution's window, a weight gradient's rows) the loop vectoriser is what vectorises the tile, and it
        stays on, as for every other kernel. The C renderer writes the tiles it can as vectors for gcc
        (`renderer.plan_vector_tiles`), whose accumulators this rule does not count: it is for the tiles left
        scalar."""
        if self.is_clang:
            # clang 19's SLP vectoriser miscomputes the sums of byte products of a byte dot's tile (a few lanes in
            # twenty off; checked against gcc, the LLVM path and numpy: tests/test_byte_dot.py): kernels holding one
            # are built without it
            return [*self.flags, "-fno-slp-vectorize"] if BYTE_DOT_MARKER in src else self.flags
        if len(_ACCUMULATOR.findall(src)) < GCC_TILE_ACCUMULATORS:
            return self.flags
        loops = _CONSTANT_LOOP.findall(src)
        if not loops or int(loops[-1][1]) < GCC_TILE_LOOP:  # the last loop opened is the innermost
            return self.flags
        return ["-fno-tree-loop-vectorize", *self.flags]

    def _run(self, cmd: list[str], src: str, what: str, feed_source: bool = True) -> None:
        proc = subprocess.run(cmd, input=src if feed_source else None, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"{cmd[0]} failed to {what} a kernel:\n{proc.stderr}\n--- source ---\n{src}")

    def disassemble(self, lib: bytes, src: str) -> str | None:
        """The shared object's code as objdump (binutils, or LLVM's) prints it; without one, the compiler's own
        assembly output for the source (`-S`, the same flags: the same code, before linking)."""
        with tempfile.TemporaryDirectory(prefix="tg-asm-") as tmp:
            if (objdump := shutil.which("objdump") or shutil.which("llvm-objdump")) is not None:
                path = os.path.join(tmp, "kernel.so")
                with open(path, "wb") as so:
                    so.write(lib)
                proc = subprocess.run([objdump, "-d", "--no-show-raw-insn", path], capture_output=True, text=True)
                if proc.returncode == 0:  # less the header naming the temporary file
                    return "\n".join(line for line in proc.stdout.splitlines() if path not in line).strip("\n")
            out = os.path.join(tmp, "kernel.s")
            flags = [f for f in self._flags_for(src) if f != "-shared"]
            self._run([self.path, *flags, "-S", "-", "-o", out], src, "assemble")
            with open(out) as asm:
                return asm.read()

    def compile(self, src: str) -> bytes:
        with tempfile.TemporaryDirectory(prefix="tg-cc-") as tmp:
            out = os.path.join(tmp, "kernel.so")
            if self.linker is not None:
                obj = os.path.join(tmp, "kernel.o")
                self._run([self.path, *self._flags_for(src), "-c", "-", "-o", obj], src, "compile")
                # -lpthread: the thread pool is built here too, and glibc before 2.34 keeps pthreads apart
                self._run([self.linker, "-shared", "-o", out, obj, "-lm", "-lpthread", str(self.runtime_lib)], src,
                          "link", feed_source=False)
            else:
                self._run([self.path, *self._flags_for(src), "-", "-o", out, "-lm"], src, "compile")
            with open(out, "rb") as f:
                return f.read()
