"""Model state: collecting a model's tensors by name, loading them back, and the checkpoint formats
(`safe_save`/`safe_load` for safetensors, `torch_load` for PyTorch files, `gguf_load` for llama.cpp's GGUF)."""

from __future__ import annotations

import os
import pathlib
import warnings
from collections.abc import Mapping
from typing import Any, cast

from tinygrad import Tensor
from tinygrad.nn.gguf import GGUFError, gguf_load
from tinygrad.nn.safetensors import SafetensorsError, safe_load, safe_load_metadata, safe_save
from tinygrad.nn.torch_load import TorchLoadError, torch_load

__all__ = ["GGUFError", "SafetensorsError", "StateDictMismatch", "TorchLoadError", "get_parameters", "get_state_dict",
           "gguf_load", "load_state_dict", "safe_load", "safe_load_metadata", "safe_save", "tar_extract", "torch_load"]


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


def tar_extract(t: Tensor | str | os.PathLike[str]) -> dict[str, Tensor]:
    """The regular files of a tar archive (uncompressed; a tensor of its bytes, or a path) as {name: uint8 tensor of
    the file's bytes}, each a slice of the archive tensor, as tinygrad's `nn.state.tar_extract`."""
    import io
    import tarfile

    if not isinstance(t, Tensor):
        t = Tensor(pathlib.Path(t).read_bytes())
    with tarfile.open(fileobj=io.BytesIO(t.numpy().tobytes()), mode="r:") as tar:
        members = [m for m in tar if m.isreg()]
    return {m.name: t[m.offset_data:m.offset_data + m.size] for m in members}
