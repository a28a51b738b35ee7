"""tinygrad: a hackable deep learning stack. `from tinygrad import Tensor, Device, Context, dtypes`."""

# `tinygrad` is one import namespace shared by several distributions (tg-core, tg-compiler, tg-nn):
# extend the package path so their sub-packages are found wherever each one is installed. Spelled as the packaging
# guide's pkgutil-style namespace package, the form that griffe (the docs site's API reader) recognises.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from tinygrad.device import Device
from tinygrad.dtype import dtypes
from tinygrad.engine.jit import TinyJit
from tinygrad.errors import BroadcastError, ConcatError, DTypeError, ShapeError
from tinygrad.function import function
from tinygrad.helpers import Context, GlobalCounters, fetch, getenv
from tinygrad.tensor import Tensor
from tinygrad.uop.ops import UOp, Variable

__version__ = "0.1.0"
__all__ = ["BroadcastError", "ConcatError", "Context", "DTypeError", "Device", "GlobalCounters", "ShapeError", "Tensor",
           "TinyJit", "UOp", "Variable", "dtypes", "fetch", "function", "getenv"]
