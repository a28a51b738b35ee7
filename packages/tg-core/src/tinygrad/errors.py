"""Exception classes that both tinygrad's and PyTorch's users catch.

The two disagree on the type of the same mistake: a reshape to the wrong size is a ValueError in tinygrad and a
RuntimeError in PyTorch, a bad permute or matmul a RuntimeError in both, mismatched cat inputs an AssertionError in
tinygrad. Each class here inherits from every type either library raises for its mistake (and from ValueError or
TypeError, which this library raised before), so `except ValueError`, `except RuntimeError` and tinygrad's
`assertRaises(...)` all still catch it. Import them from `tinygrad` or `tinygrad.errors`.

`CompileError` is the one error of a backend's compiler that the layers above it catch (BEAM search skips the
candidate): it lives here so that raising and catching it imports no compiler module.
"""

from __future__ import annotations


class ShapeError(ValueError, RuntimeError):
    """Shapes that do not fit the operation: reshape to another size, permute with a bad order, matmul of
    mismatched inner sizes, expand of a dimension that is not 1, shrink or pad outside the shape."""


class BroadcastError(ShapeError, IndexError):
    """Shapes that cannot be broadcast together (tinygrad raises IndexError, numpy's broadcast_shapes' type)."""


class ConcatError(ShapeError, AssertionError):
    """cat or stack of tensors whose shapes do not match (tinygrad asserts, PyTorch raises RuntimeError)."""


class ConcatDimError(ConcatError, IndexError):
    """cat of 0-d tensors, which have no dimension to join along (tinygrad raises IndexError for the missing
    dimension 0, PyTorch RuntimeError)."""


class ArgListError(TypeError, ValueError):
    """Tensors given both as one list and as further arguments: `Tensor.stack([a, b], c)` (tinygrad raises
    ValueError, PyTorch TypeError, reading c as the dim)."""


class ArgumentError(ValueError, RuntimeError):
    """An argument value the operation does not take, other than a shape: an option string that is not one of its
    choices, a dimension named twice, shifts and dims of different lengths, a step that is not positive, attn_mask
    together with is_causal (tinygrad and PyTorch raise RuntimeError)."""


class ModeError(ArgumentError, NotImplementedError):
    """A mode name that is not one of the operation's modes, as pad's mode="typo" (both libraries raise
    NotImplementedError)."""


class IndexTypeError(IndexError, TypeError):
    """An index of a type that cannot index, as a tensor for a slice bound (tinygrad and Python's own sequences
    raise TypeError; this library raised IndexError)."""


class DTypeError(TypeError, RuntimeError):
    """A dtype the operation does not take: an integer index that is a float, a bool tensor where arithmetic needs
    numbers, a float op on integers (tinygrad and PyTorch raise RuntimeError)."""


class ShapeArgError(TypeError, ValueError):
    """A shape argument that is not a tuple of ints: `Tensor.zeros((2, 2), 2)` (tinygrad raises ValueError, PyTorch
    TypeError)."""


class UnknownDTypeError(TypeError, AttributeError):
    """A dtype given by a name that is not one, or by something that is not a dtype (tinygrad looks the name up
    as an attribute of `dtypes` and raises AttributeError)."""


class DeviceDTypeError(TypeError):
    """A dtype the device cannot hold (float64 on a device without it, say): a limit of the device, not a mistake in
    the program; callers that try another device or skip the case tell it apart by this type."""


class CompileError(RuntimeError):
    """A backend's compiler refused a kernel's source; the message carries the compiler's log (and the source where
    it helps). Backends raise it from `Compiler.compile`; BEAM search skips a candidate that raises it."""


__all__ = ["ArgListError", "ArgumentError", "BroadcastError", "CompileError", "ConcatDimError", "ConcatError",
           "DTypeError", "DeviceDTypeError", "IndexTypeError", "ModeError", "ShapeArgError", "ShapeError",
           "UnknownDTypeError"]
