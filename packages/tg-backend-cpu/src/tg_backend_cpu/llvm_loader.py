"""Loading object files from LLVMCompiler into this process: MCJIT links them in memory (no file, no dlopen)
and resolves what they call (libm's sinf and such) against the symbols the process already has.

Objects go into a few long-lived MCJIT engines. Kernels of one name but different code (two `r_16_16`) cannot share
an engine, whose symbols are one namespace: each object goes to the first engine that has none of its symbols
yet, so there are about as many engines as the most kernels sharing a name. An object loaded before is not loaded
again. Loaded code stays for the life of the process, as a dlopened library does.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from tg_backend_cpu.llvm_compiler import host_target_machine, llvmlite_binding

_lock = threading.Lock()
_engines: list[Any] = []
_loaded: dict[tuple[bytes, tuple[str, ...]], dict[str, int]] = {}


def load_object(obj: bytes, functions: tuple[str, ...], constants: tuple[str, ...]) -> dict[str, int]:
    """The addresses of the named functions and global constants of the object file `obj`, loaded once."""
    key = (hashlib.sha256(obj).digest(), functions + constants)
    with _lock:
        if (hit := _loaded.get(key)) is not None:
            return hit
        llvm = llvmlite_binding()
        engine = next((e for e in _engines if not any(e.get_function_address(f) for f in functions)), None)
        if engine is None:
            # an engine owns its target machine, so each gets its own
            engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), host_target_machine(llvm))
            _engines.append(engine)
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        addresses = {f: engine.get_function_address(f) for f in functions}
        addresses.update({c: engine.get_global_value_address(c) for c in constants})
        if missing := [name for name, address in addresses.items() if not address]:
            raise RuntimeError(f"the loaded kernel object has no {', '.join(missing)}")
        _loaded[key] = addresses
        return addresses


def entry_points(name: str, obj: bytes) -> dict[str, int]:
    """The addresses of a kernel's entry points and constants (see llvm_renderer.py), for `CPUProgram`."""
    return load_object(obj, (f"{name}_tg_run", f"{name}_tg_slice"), (f"{name}_tg_nargs", f"{name}_tg_outer"))
