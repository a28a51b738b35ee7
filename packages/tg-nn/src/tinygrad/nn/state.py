"""Model state: collecting a model's tensors by name, loading them back, and the checkpoint formats
(`safe_save`/`safe_load` for safetensors, `torch_load` for PyTorch files, `gguf_load` for llama.cpp's GGUF)."""

from __future__ import annotations

import io
import os
import pathlib
import struct
import warnings
import zlib
from collections.abc import Mapping
from typing import Any, cast

from tinygrad import Tensor, dtypes
from tinygrad.device.disk import is_disk
from tinygrad.engine import disk_views
from tinygrad.nn.gguf import GGUFError, gguf_load
from tinygrad.nn.safetensors import SafetensorsError, safe_load, safe_load_metadata, safe_save
from tinygrad.nn.torch_load import TorchLoadError, torch_load

__all__ = ["GGUFError", "SafetensorsError", "StateDictMismatch", "TorchLoadError", "get_parameters", "get_state_dict",
           "gguf_load", "load_state_dict", "safe_load", "safe_load_metadata", "safe_save", "tar_extract", "torch_load",
           "zip_extract"]


class StateDictMismatch(KeyError, ValueError):
    """A state dict whose names or shapes do not fit the model (a KeyError for a name, a ValueError for a shape, as
    tinygrad raises it)."""

    def __str__(self) -> str:  # KeyError would show the message as a quoted repr
        return str(self.args[0]) if self.args else ""


def _fits(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    # a one-element counter is () in PyTorch (num_batches_tracked) and (1,) in tinygrad: either loads into the other
    return src == dst or ({src, dst} <= {(), (1,)})


def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
    """Every tensor reachable from `obj` through attributes, dicts, lists and tuples, by dotted name
    (`layers.0.weight`), the names PyTorch's state_dict uses for the same structure."""
    out: dict[str, Tensor] = {}
    _collect(obj, prefix, tensor_type, out, set())
    return out


def _collect(obj: Any, prefix: str, tensor_type: type, out: dict[str, Tensor], seen: set[int]) -> None:
    if isinstance(obj, tensor_type):
        out[prefix.rstrip(".")] = cast(Tensor, obj)
        return
    if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool, type)):
        return
    seen.add(id(obj))  # a module reachable twice (or a cycle) is listed under its first name
    if hasattr(obj, "_asdict"):  # namedtuple
        items: Any = obj._asdict().items()
    elif isinstance(obj, Mapping):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    elif hasattr(obj, "__dict__"):
        items = vars(obj).items()
    else:
        return
    for k, v in items:
        _collect(v, f"{prefix}{k}.", tensor_type, out, seen)


def get_parameters(obj: Any) -> list[Tensor]:
    """Every tensor of the model (weights and buffers such as BatchNorm's running statistics); optimizers step
    the ones with requires_grad and keep the others realized."""
    return list(get_state_dict(obj).values())


def load_state_dict(model: Any, state_dict: Mapping[str, Tensor], strict: bool = True, verbose: bool = True,
                    consume: bool = False, realize: bool = True) -> list[Tensor]:
    """Copy `state_dict`'s tensors into the model's tensors of the same names (cast to their dtype, moved to their
    device). strict: missing, unexpected and mis-shaped keys are all reported in one error and nothing is loaded;
    otherwise they are skipped with a warning. consume: delete each loaded entry from `state_dict` (frees memory
    while loading a large checkpoint). Returns the model tensors that were loaded."""
    del verbose  # kept for tinygrad's signature; this loader shows no progress bar
    targets = get_state_dict(model)
    missing = [k for k in targets if k not in state_dict]
    unexpected = [k for k in state_dict if k not in targets]
    # tinygrad's wording, which its users' tests match
    misshaped = [f"Shape mismatch in layer `{k}`: Expected shape {targets[k].shape}, but found "
                 f"{tuple(state_dict[k].shape)} in state dict." for k in targets
                 if k in state_dict and not _fits(tuple(state_dict[k].shape), targets[k].shape)]
    problems = []
    if missing:
        problems.append(f"missing from the checkpoint: {missing}")
    if unexpected:
        problems.append(f"not in the model: {unexpected}")
    if misshaped:
        problems.append("shapes differ: " + " ".join(misshaped))
    if problems and strict:
        raise StateDictMismatch("load_state_dict: " + "; ".join(problems) + ". Fix the names/shapes, or pass "
                                "strict=False to load only the entries that match")
    if problems:
        warnings.warn("load_state_dict (strict=False) skipped entries: " + "; ".join(problems), stacklevel=2)
    loaded = []
    for k, t in targets.items():
        if k not in state_dict or not _fits(tuple(state_dict[k].shape), t.shape):
            continue
        v = state_dict[k]
        t.assign(v.to(t.device).cast(t.dtype).reshape(t.shape).contiguous().detach())
        loaded.append(t)
        if consume:
            del state_dict[k]  # type: ignore[attr-defined]
    if realize and loaded:
        Tensor.realize(*loaded)
    return loaded


class _BytesReader(io.RawIOBase):
    """A seekable binary file over a memoryview, for tarfile and zipfile: they read an archive's headers, and nothing
    is copied but what they read."""

    def __init__(self, data: memoryview):
        self.data, self.pos = data, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        chunk = self.data[self.pos:self.pos + len(b)]
        b[:len(chunk)] = chunk
        self.pos += len(chunk)
        return len(chunk)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.pos = max(0, offset + (0, self.pos, len(self.data))[whence])
        return self.pos

    def tell(self) -> int:
        return self.pos


def _archive(t: Tensor | str | os.PathLike[str], what: str) -> tuple[Tensor, memoryview]:
    """An archive as a uint8 tensor and its bytes: a path (or a DISK tensor) is the file mapped into memory and
    read where it lies, so members come back as slices of the file, read when used."""
    if not isinstance(t, Tensor):
        t = Tensor(pathlib.Path(t))
    if t.dtype != dtypes.uint8 or t.ndim != 1:
        raise TypeError(f"{what} takes the archive's bytes as a 1-d uint8 tensor (or a path), not {t.dtype} "
                        f"{tuple(t.shape)}")
    view = disk_views.mapped_bytes(t.uop) if is_disk(t.device) else None
    return t, view if view is not None else memoryview(t.numpy().tobytes())


def tar_extract(t: Tensor | str | os.PathLike[str]) -> dict[str, Tensor]:
    """The regular files of a tar archive (uncompressed; a tensor of its bytes, or a path) as {name: uint8 tensor of
    the file's bytes}, each a slice of the archive tensor, as tinygrad's `nn.state.tar_extract`."""
    import tarfile

    t, data = _archive(t, "tar_extract")
    with tarfile.open(fileobj=_BytesReader(data), mode="r:") as tar:
        members = [m for m in tar if m.isreg()]
    return {m.name: t[m.offset_data:m.offset_data + m.size] for m in members}


def zip_extract(t: Tensor | str | os.PathLike[str]) -> dict[str, Tensor]:
    """The files of a zip archive (a tensor of its bytes, or a path) as {name: uint8 tensor}, as tinygrad's
    `nn.state.zip_extract`: a stored member is a slice of the archive tensor (nothing read until used), a deflated
    one is inflated now (into a host tensor) and checked against its CRC-32. Other compressions raise."""
    import zipfile

    t, data = _archive(t, "zip_extract")
    files: dict[str, Tensor] = {}
    with zipfile.ZipFile(_BytesReader(data)) as archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            # the local header repeats the name and has its own extra field: the data starts after both
            header = data[info.header_offset:info.header_offset + 30]
            if bytes(header[:4]) != b"PK\x03\x04":
                raise ValueError(f"zip_extract: {info.filename}'s local header is damaged")
            name_len, extra_len = struct.unpack_from("<HH", header, 26)
            start = info.header_offset + 30 + name_len + extra_len
            if info.compress_type == zipfile.ZIP_STORED:
                files[info.filename] = t[start:start + info.compress_size]
            elif info.compress_type == zipfile.ZIP_DEFLATED:
                raw = zlib.decompress(bytes(data[start:start + info.compress_size]), -15)
                if zlib.crc32(raw) != info.CRC:
                    raise ValueError(f"zip_extract: {info.filename} fails its CRC-32 check")
                files[info.filename] = Tensor(raw, device=t.device if not is_disk(t.device) else None)
            else:
                raise NotImplementedError(f"zip_extract: {info.filename} uses compression method {info.compress_type}"
                                          f"; only stored and deflated members are read")
    return files
