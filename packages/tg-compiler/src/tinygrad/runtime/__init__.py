"""What runs a compiled kernel on a device, apart from what writes it (`tinygrad.codegen`).

- `runtime/device.py`: `Compiled`, the device base a backend plugs its renderer, compiler, allocator and program
  factory into; core asks it for a runner (`get_runner(ast)`).
- `runtime/runner.py`: `CompiledRunner` (a compiled kernel launched with a schedule item's buffers), the `Program`
  a backend loads from a binary and its `ProgramSpec`, and loading runners from a pickle.
- `runtime/compiler.py`: the `Compiler` base and the on-disk cache of compiled binaries.
- `runtime/beam_timing.py`: `BEAM=n` timing candidate opts on the device (the search itself is
  `tinygrad.codegen.beam`).

Dependencies point down: `device` uses the other three, `runner` uses `compiler`, and none imports `device`.
"""
