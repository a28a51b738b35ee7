"""The `Compiler` base a backend subclasses (`compile(src) -> bytes`) and the on-disk cache of what it compiles."""

from __future__ import annotations

from collections.abc import Callable

from tinygrad.helpers import DISABLE_COMPILER_CACHE, disk_cache_get, disk_cache_put


class Compiler:
    """`compile(src) -> bytes`, raising `tinygrad.errors.CompileError` with the compiler's log for a source it
    refuses. `cache_key` must change whenever the output for the same source could."""

    cache_key: str = ""
    #: whether compile() may run in several threads at once (a compiler run as a subprocess, which also leaves
    #: the GIL); `Compiled.precompile` then builds the kernels of a schedule concurrently
    parallel: bool = False

    def compile(self, src: str) -> bytes:
        raise NotImplementedError

    def expect_batch(self, kernels: int) -> None:
        """`Compiled.precompile` is about to compile `kernels` kernels concurrently (a parallel compiler only): a
        compiler that compiles in process can start helpers here (the CPU backend's LLVM path starts worker
        processes). Optional; the default does nothing."""

    def end_batch(self) -> None:
        """The batch `expect_batch` announced is built (its kernels compiled or read from the cache): helpers that
        were to start for it, and have not, need not start for a later kernel. Optional; the default does nothing."""

    #: why `disassemble` gives nothing, for DEBUG>=7 to say (a compiler that has no assembly to show sets it)
    no_assembly_reason: str = ""

    def disassemble(self, lib: bytes, src: str) -> str | None:
        """The assembly of `lib`, which `compile(src)` made (DEBUG>=7 prints it); None: this device gives none.
        `src` is there for compilers that can only show assembly by building the source again."""
        return None

    def compile_cached(self, src: str) -> bytes:
        if DISABLE_COMPILER_CACHE or not self.cache_key:
            return self.compile(src)
        return disk_cache_get_or_make(self.cache_key, src, lambda: self.compile(src))


def disk_cache_get_or_make(namespace: str, src: str, make: Callable[[], bytes]) -> bytes:
    """A content-addressed cache of compiled binaries, in the `compile` table of the disk cache (`helpers`).

    The key is the compiler's `namespace` and the source, and the disk cache binds each entry to its key and checks
    it on every read: an entry that is corrupt, truncated, not a regular file, or was written for another source
    (a file copied or renamed in the cache) is never served; it is rebuilt and overwritten. A cache that cannot be
    written is warned about once and compiling goes on.
    """
    key = f"{namespace}\0{src}"
    if (payload := disk_cache_get("compile", key)) is not None:
        return payload
    payload = make()
    disk_cache_put("compile", key, payload)
    return payload


def compiler_identity(compiler: Compiler) -> tuple[str, str]:
    """What made a binary: the compiler's class and its cache key, which changes whenever its output could."""
    kind = type(compiler)
    return f"{kind.__module__}.{kind.__qualname__}", compiler.cache_key


__all__ = ["Compiler", "compiler_identity", "disk_cache_get_or_make"]
