"""Reading ONNX protobufs: the model itself, tensors (initializers, Constant values, test data), external data files
and attributes. Only this module and the runner import the `onnx` package, and only when a model is loaded, so that
`import tinygrad.onnx` works without it.

External data is read here rather than by onnx's own helpers, so that every location is checked against the model's
folder first: an absolute path, `..`, or a symlink that leads out of the folder is refused with an OnnxError, before
anything is opened.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import numpy as np

INSTALL_HINT = "pip install 'tg-nn[onnx]'"

# the largest tensor a protobuf or a shape computation may describe; far beyond any real model, small enough that
# the element count fits in an int64 and a hostile dims list is refused before numpy or the device sees it
MAX_ELEMENTS = 1 << 40


class OnnxError(ValueError):
    """A model this runner cannot load or run as given: a damaged protobuf, a hostile external data location,
    inputs that do not match the graph."""


def import_onnx() -> Any:
    """The `onnx` package, or an ImportError that says how to install it (it is an optional dependency)."""
    try:
        import onnx
    except ImportError as e:
        raise ImportError(f"tinygrad.onnx needs the `onnx` package to read models: {INSTALL_HINT}") from e
    return onnx


def load_model(model: Any, base_dir: str | os.PathLike | None = None) -> tuple[Any, str | None]:
    """A ModelProto and the folder its external data is read from (None: the model may not have any).
    `model` is a path, the serialized bytes (also as a uint8 Tensor), or a ModelProto."""
    onnx = import_onnx()
    from google.protobuf.message import DecodeError
    from tinygrad import Tensor

    if isinstance(model, Tensor):  # the model's bytes in a uint8 tensor, as tinygrad's own runner takes them
        if model.dtype.name != "uint8" or model.ndim != 1:
            raise TypeError(f"OnnxRunner takes a model as a 1-D uint8 Tensor of its bytes, got a {model.dtype.name} "
                            f"tensor of shape {model.shape}")
        model = model.numpy().tobytes()
    if isinstance(model, onnx.ModelProto):
        proto, folder = model, base_dir
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(bytes(model))
        except DecodeError as e:
            raise OnnxError(f"the bytes given are not a valid ONNX model (protobuf decode failed: {e})") from e
        folder = base_dir
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no ONNX model file at {path!r}")
        with open(path, "rb") as f:
            data = f.read()
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(data)
        except DecodeError as e:
            raise OnnxError(f"{path!r} is not a valid ONNX model (protobuf decode failed: {e}); the file may be "
                            f"truncated") from e
        folder = base_dir if base_dir is not None else os.path.dirname(os.path.abspath(path))
    else:
        raise TypeError(f"OnnxRunner takes a path, the model's bytes (or a uint8 Tensor of them) or an "
                        f"onnx.ModelProto, got {type(model).__name__}")
    if not proto.HasField("graph"):
        raise OnnxError("the ONNX model has no graph (an empty or truncated file?)")
    return proto, None if folder is None else os.fspath(folder)


# ---- data types ----
# ONNX element type -> name of the tinygrad dtype holding it. The types with no tinygrad dtype are computed in a
# wider one that holds every value exactly (EMULATED below); the device never sees them.
_NATIVE = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
           10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16", 17: "fp8e4m3", 19: "fp8e5m2"}
# exotic type -> (tinygrad dtype computed in, kind). The values of a 4- or 2-bit integer fit an int8/uint8; the small
# floats (FNUZ 8-bit, 4-bit E2M1, the E8M0 scale type) are float32 values rounded to the type at every Cast
EMULATED = {18: ("float32", "e4m3fnuz"), 20: ("float32", "e5m2fnuz"), 21: ("uint8", "uint4"), 22: ("int8", "int4"),
            23: ("float32", "e2m1"), 24: ("float32", "e8m0"), 25: ("uint8", "uint2"), 26: ("int8", "int2")}
STRING, COMPLEX = 8, (14, 15)


def type_name(elem_type: int) -> str:
    onnx = import_onnx()
    try:
        return str(onnx.TensorProto.DataType.Name(elem_type))
    except ValueError:
        return f"type {elem_type}"


def tg_dtype(elem_type: int) -> Any:
    """The tinygrad dtype that holds an ONNX element type (emulated types: the wider dtype they are computed in)."""
    from tinygrad import dtypes

    name = _NATIVE.get(elem_type) or EMULATED.get(elem_type, (None, None))[0]
    if name is None:
        raise NotImplementedError(f"ONNX element type {type_name(elem_type)} has no tinygrad equivalent")
    return getattr(dtypes, name)


def host_array(arr: np.ndarray) -> np.ndarray:
    """A numpy array of a dtype tinygrad takes: the ml_dtypes arrays onnx gives for bfloat16, the 8-bit floats and
    the packed types become float32 or small integers (every value kept exactly)."""
    kind = arr.dtype.kind
    if kind in "biuf?" and arr.dtype.name in ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                                                 "int64", "uint64", "float16", "float32", "float64"):
        return arr
    name = arr.dtype.name
    if name.startswith("uint"):  # ml_dtypes uint4 / uint2
        return arr.astype(np.uint8)
    if name.startswith("int"):
        return arr.astype(np.int8)
    if kind == "U" or kind == "O" or kind == "S":
        return arr
    return arr.astype(np.float32)


def _packed_nbytes(elem_type: int, count: int) -> int | None:
    if elem_type in (21, 22, 23):
        return (count + 1) // 2
    if elem_type in (25, 26):
        return (count + 3) // 4
    return None


def tensor_to_numpy(t: Any, folder: str | None, what: str) -> np.ndarray:
    """A TensorProto's value as numpy, validated: dims, data length, external data location. Raw data of the common
    types becomes a view of the protobuf's bytes (no copy); external data is read once from its file."""
    onnx = import_onnx()
    from onnx import numpy_helper

    dims = tuple(int(d) for d in t.dims)
    if any(d < 0 for d in dims):
        raise OnnxError(f"{what}: negative dimension in {dims}")
    count = math.prod(dims)
    if count > MAX_ELEMENTS:
        raise OnnxError(f"{what}: dims {dims} describe {count} elements, more than this runner accepts "
                        f"({MAX_ELEMENTS})")
    et = int(t.data_type)
    if et == 0:
        raise OnnxError(f"{what}: tensor has no element type")
    if et in COMPLEX:
        raise NotImplementedError(f"{what}: complex tensors ({type_name(et)}) are not supported")
    if t.HasField("segment"):
        raise NotImplementedError(f"{what}: segmented tensors are not supported")
    if et == STRING:
        if len(t.string_data) != count:
            raise OnnxError(f"{what}: dims {dims} describe {count} strings but the tensor holds {len(t.string_data)}")
        return numpy_helper.to_array(t)
    try:
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(et)
    except (KeyError, ValueError) as e:
        raise NotImplementedError(f"{what}: unknown element type {et}") from e
    packed = _packed_nbytes(et, count)
    nbytes = packed if packed is not None else count * np.dtype(np_dtype).itemsize
    external = t.data_location == onnx.TensorProto.EXTERNAL
    if external or t.HasField("raw_data"):
        # one bytes object (protobuf hands out a copy per access), viewed by numpy without another copy
        raw = _read_external(t, folder, nbytes, what) if external else t.raw_data
        if len(raw) != nbytes:
            raise OnnxError(f"{what}: raw data holds {len(raw)} bytes, dims {dims} of {type_name(et)} need {nbytes}")
        if packed is None and np.dtype(np_dtype).byteorder != ">" and sys.byteorder == "little":
            return host_array(np.frombuffer(raw, dtype=np_dtype).reshape(dims))
        proxy = onnx.TensorProto()  # the sub-byte types (and big-endian hosts): onnx unpacks them
        proxy.data_type, proxy.dims[:] = et, dims
        proxy.raw_data = raw
        return host_array(numpy_helper.to_array(proxy))
    field = onnx.helper.tensor_dtype_to_field(et)
    have = len(getattr(t, field))
    # typed fields hold one entry per value (the sub-byte types pack several into one entry)
    if packed is None and have != count:
        raise OnnxError(f"{what}: dims {dims} describe {count} values but the tensor holds {have}")
    if packed is not None and count and have == 0:
        raise OnnxError(f"{what}: dims {dims} describe {count} values but the tensor holds no data")
    try:
        return host_array(numpy_helper.to_array(t))
    except (ValueError, TypeError) as e:
        raise OnnxError(f"{what}: cannot read tensor data: {e}") from e


def _read_external(t: Any, folder: str | None, nbytes: int, what: str) -> bytes:
    info = {e.key: e.value for e in t.external_data}
    location = info.get("location", "")
    if not location:
        raise OnnxError(f"{what}: external data without a location")
    if folder is None:
        raise OnnxError(f"{what}: tensor data lives in the external file {location!r}, but the model was not given "
                        f"as a path; pass base_dir= (the folder that holds the data)")
    path = safe_data_path(folder, location, what)
    try:
        offset = int(info.get("offset", "0"))
        length = int(info["length"]) if "length" in info else None
    except ValueError as e:
        raise OnnxError(f"{what}: bad external data offset/length {info}") from e
    size = os.path.getsize(path)
    if length is None:
        length = nbytes
    if offset < 0 or length < 0 or offset + length > size:
        raise OnnxError(f"{what}: external data range [{offset}, {offset + length}) is outside {location!r} "
                        f"({size} bytes)")
    if length != nbytes:
        raise OnnxError(f"{what}: external data length {length} does not match the {nbytes} bytes its dims need")
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(length)
    if len(data) != length:
        raise OnnxError(f"{what}: short read from {location!r}")
    return data


def safe_data_path(folder: str, location: str, what: str) -> str:
    """The file an external data location names, which must lie inside the model's folder (after resolving
    symlinks); anything else is refused before it is opened."""
    if "\0" in location or os.path.isabs(location) or location.startswith(("/", "\\")) or \
            (len(location) > 1 and location[1] == ":"):
        raise OnnxError(f"{what}: external data location {location!r} is an absolute path; ONNX external data must "
                        f"be relative to the model's folder")
    parts = location.replace("\\", "/").split("/")
    if ".." in parts:
        raise OnnxError(f"{what}: external data location {location!r} leads out of the model's folder ('..')")
    base = os.path.realpath(folder)
    path = os.path.realpath(os.path.join(base, location))
    if os.path.commonpath([base, path]) != base or path == base:
        raise OnnxError(f"{what}: external data location {location!r} resolves to {path!r}, outside the model's "
                        f"folder {base!r}")
    if not os.path.isfile(path):
        raise OnnxError(f"{what}: external data file {location!r} does not exist in {base!r}")
    return path


# ---- attributes ----
def attribute_value(a: Any, folder: str | None, what: str) -> Any:
    """A node attribute as a Python value: numbers, str, lists, numpy arrays for tensors, GraphProto for graphs.
    An attribute that refers to a function's attribute (ref_attr_name) is returned as such for the caller."""
    onnx = import_onnx()
    A = onnx.AttributeProto
    if a.ref_attr_name:
        return _AttrRef(a.ref_attr_name)
    t = a.type
    if t == A.FLOAT: return float(a.f)
    if t == A.INT: return int(a.i)
    if t == A.STRING: return a.s.decode("utf-8", errors="replace")
    if t == A.TENSOR: return tensor_to_numpy(a.t, folder, f"{what} attribute {a.name!r}")
    if t == A.GRAPH: return a.g
    if t == A.FLOATS: return [float(v) for v in a.floats]
    if t == A.INTS: return [int(v) for v in a.ints]
    if t == A.STRINGS: return [s.decode("utf-8", errors="replace") for s in a.strings]
    if t == A.TENSORS: return [tensor_to_numpy(x, folder, f"{what} attribute {a.name!r}") for x in a.tensors]
    if t == A.GRAPHS: return list(a.graphs)
    if t == A.SPARSE_TENSOR:
        raise NotImplementedError(f"{what}: sparse tensor attributes are not supported")
    if t == A.TYPE_PROTO:
        tp = onnx.TypeProto()  # a copy: a sub-message keeps the whole model's arena alive
        tp.CopyFrom(a.tp)
        return tp
    raise OnnxError(f"{what}: attribute {a.name!r} has an unknown type {t}")


class _AttrRef:
    """An attribute of a function body node that takes its value from the calling node's attribute `name`."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name
