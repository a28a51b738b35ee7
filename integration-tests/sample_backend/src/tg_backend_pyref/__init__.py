"""tinygrad's reference backend, PYREF, and the template for a backend plugin.

This is the module the entry point names (`[project.entry-points."tinygrad.backends"]` in
pyproject.toml). tinygrad imports it while discovering backends, so it stays light: it imports only
`tinygrad.device` and describes the backend. The device itself (renderer, compiler, allocator,
program) is built in `tg_backend_pyref.device`, imported when the device is first opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinygrad.device import BackendInfo, hookimpl

if TYPE_CHECKING:
    from tg_backend_pyref.device import PyRefDevice

__version__ = "0.1.0"

#: The device contract this backend was written against. A literal, not `tinygrad.device.CONTRACT_VERSION`:
#: the point is to state what *this* package implements, so that a core of another major version refuses it.
CONTRACT_VERSION = "2.0"

#: PYREF is an oracle, far slower than any real device: it is never the default unless it is the only
#: backend; ask for it with DEV=PYREF or Tensor(..., device="PYREF").
PRIORITY = 10_000


def _open(index: int) -> PyRefDevice:
    from tg_backend_pyref.device import PyRefDevice

    return PyRefDevice(index)


@hookimpl
def tinygrad_backends() -> list[BackendInfo]:
    return [BackendInfo(name="PYREF", contract_version=CONTRACT_VERSION, open=_open, priority=PRIORITY,
                        description="reference interpreter: runs the linearized program in Python with the "
                                    "reference semantics of tinygrad.uop.alu (slow; an oracle)")]
