"""The backend conformance kit: a pytest plugin any backend, first- or third-party, runs against its device.

    pytest --pyargs tinygrad.conformance --tg-device=CL

It checks every required ALU op, CAST and BITCAST on every dtype the device claims against the reference
semantics (`tinygrad.uop.alu`) over edge values, reductions of odd sizes, launch shapes at and past the usual
work-group limits, host/device and device/device copies, and that an unclaimed dtype is refused with a clear
error. See README.md next to this file for what each group checks and how to read the report.

Where the device is absent, `--tg-compile-only --tg-target=TARGET` builds every kernel for that target with the
backend's renderer and compiler (its `tinygrad_compile_only` hook, `compile_only`) on a stand-in device that runs
none (`standin`), and reports what failed to compile.

The helpers (`values`, `kernels`, `compare`, `tolerances`) are public so that a backend's own tests can reuse
them; the test modules are `test_*.py` in this package and are run by pytest, not imported.
"""
