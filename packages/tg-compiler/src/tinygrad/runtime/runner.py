"""A compiled kernel ready to launch: the backend's `Program`, made from the binary and the kernel's `ProgramSpec`,
and the `CompiledRunner` that launches it on a schedule item's buffers. A runner pickles as its binary and spec,
and loads only where the same compiler would have made that binary."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from tinygrad.codegen import ProgramSpec
from tinygrad.device import Buffer, Device
from tinygrad.helpers import DEBUG
from tinygrad.runtime.compiler import Compiler, compiler_identity


class Program(Protocol):
    """A kernel loaded on the device. Launched with the buffers' opaque handles in the spec's parameter order, then
    the values of its symbolic variables; with `wait`, it returns the seconds the launch took (None: unknown)."""

    def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None: ...


#: how a device loads a program: from the kernel's spec (its name, launch sizes, estimated work) and the binary its
#: compiler made from the spec's source. Backends pass their program class (bound to the device) as this
ProgramFactory = Callable[[ProgramSpec, bytes], Program]


class ProgramHost(Protocol):
    """What a runner needs of its device: `Compiled` is one."""

    name: str
    compiler: Compiler
    runtime: ProgramFactory


class CompiledRunner:
    """A compiled kernel, ready to launch on the buffers of a schedule item."""

    def __init__(self, device: ProgramHost, spec: ProgramSpec, lib: bytes):
        self.spec, self.lib = spec, lib
        self.device_name = device.name
        #: what made `lib`: the compiler's class and its cache key, which changes whenever its output could
        self.made_by = compiler_identity(device.compiler)
        self.display_name = spec.name
        self.global_size, self.local_size = spec.global_size, spec.local_size
        self.estimated_ops, self.estimated_bytes = spec.estimated_ops, spec.estimated_bytes
        self.program = device.runtime(spec, lib)
        if DEBUG >= 7:
            asm = device.compiler.disassemble(lib, spec.src)
            reason = getattr(device.compiler, "no_assembly_reason", "")
            print(asm.rstrip("\n") if asm is not None else
                  f"{spec.name}: no assembly: {device.name}'s compiler ({type(device.compiler).__name__}) gives none"
                  + (f" ({reason})" if reason else ""), file=sys.stderr)

    def __reduce__(self) -> tuple:
        # the compiled program, not the loaded one (a handle into this process): loading hands `lib` to the
        # device's runtime again, and compiles nothing
        return _runner_from_pickle, (self.device_name, self.made_by, self.spec, self.lib)

    def __call__(self, bufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        args = [bufs[i].opaque for i in self.spec.param_indices]
        return self.program(*args, global_size=self.global_size, local_size=self.local_size,
                            vals=tuple(var_vals[name] for name in self.spec.var_names), wait=wait)

    def launcher(self) -> Callable[[list[Buffer]], Any]:
        """A launch function for a kernel without symbolic variables, taking its schedule item's buffers: the eager
        dispatch cache (engine/dispatch.py) calls it once per realize. A program may offer `launcher(global_size,
        local_size)`, taking the buffers in parameter order, to do less per call."""
        if self.spec.var_names:
            raise ValueError(f"kernel {self.display_name} takes symbolic values: launch it with its var_vals")
        order = self.spec.param_indices
        if (fast := getattr(self.program, "launcher", None)) is not None:
            run = fast(self.global_size, self.local_size)
            if list(order) == list(range(len(order))):
                return run  # type: ignore[no-any-return]
            return lambda bufs: run([bufs[i] for i in order])
        return lambda bufs: self(bufs, {})

    def prepare(self, bufs: list[Buffer], var_vals: dict[str, int]) -> Callable[[], float | None]:
        """This launch with its arguments resolved once: TinyJit replays the returned callable, so a replay does no
        per-kernel lookups. A program may offer `prepare(*bufs, global_size=, local_size=, vals=)` to do more."""
        args = [bufs[i].opaque for i in self.spec.param_indices]
        vals = tuple(var_vals[name] for name in self.spec.var_names)
        if (prep := getattr(self.program, "prepare", None)) is not None:
            return prep(*args, global_size=self.global_size, local_size=self.local_size, vals=vals)
        return functools.partial(self.program, *args, global_size=self.global_size, local_size=self.local_size,
                                 vals=vals)


class ProgramMismatchError(RuntimeError):
    """A compiled program (from a pickle) that this machine's device cannot be trusted to run."""


@runtime_checkable
class _LoadsPrograms(Protocol):
    """A device that compiles, and so can load a runner from its binary: `Compiled` is one."""

    compiler: Compiler

    def runner_from(self, spec: ProgramSpec, lib: bytes) -> CompiledRunner: ...


def _runner_from_pickle(device_name: str, made_by: tuple[str, str], spec: ProgramSpec, lib: bytes) -> CompiledRunner:
    """CompiledRunner.__reduce__'s inverse. The binary runs only where the same compiler with the same key (the
    key of the compile cache: compiler version, flags, target CPU and its features, driver) would have made it;
    anything else is refused rather than run, since another CPU's instructions or another driver's binary could
    crash or compute wrongly."""
    try:
        device = Device[device_name]
    except Exception as e:
        raise ProgramMismatchError(f"kernel {spec.name} was compiled for device {device_name}, which cannot be "
                                   f"opened here ({type(e).__name__}: {e}); load it on a machine with that "
                                   f"device") from e
    if not isinstance(device, _LoadsPrograms) or not isinstance(device.compiler, Compiler):
        raise _mismatch(spec, device_name, made_by, f"no compiler ({type(device).__name__})")
    if (here := compiler_identity(device.compiler)) != made_by:
        raise _mismatch(spec, device_name, made_by, f"{here[0]} with key {here[1]!r}")
    return device.runner_from(spec, lib)


def _mismatch(spec: ProgramSpec, device_name: str, made_by: tuple[str, str], here: str) -> ProgramMismatchError:
    return ProgramMismatchError(f"kernel {spec.name} was compiled for {device_name} by {made_by[0]} with key "
                                f"{made_by[1]!r}, and {device_name} here compiles with {here}: the binary may not run "
                                f"on this machine (another CPU or CPU features, compiler, flags or driver). Capture "
                                f"and pickle it again on this machine")


__all__ = ["CompiledRunner", "Program", "ProgramFactory", "ProgramHost", "ProgramMismatchError"]
