"""torch_load against hostile and damaged checkpoints: pickles written opcode by opcode that try to change the
loader (BUILD, SETITEM, APPEND on its stand-ins), name forbidden globals, or ask for work far beyond their size
(shared sub-objects, huge views); and a fuzz run over byte-mutated checkpoints written by torch. Every load either
succeeds or raises TorchLoadError, quickly, and leaves the loader as it was.

TG_FUZZ_CASES=10000 runs a longer fuzz than the default 500 cases."""

from __future__ import annotations

import collections
import inspect
import io
import os
import pickle
import random
import signal
import struct
import time
import zipfile
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from tinygrad.nn import _safe_pickle
from tinygrad.nn import torch_load as torch_load_module
from tinygrad.nn.state import TorchLoadError, torch_load

torch = pytest.importorskip("torch", reason="checkpoints written by torch.save are the reference input")

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


# ---- writing pickles and checkpoints by hand ----

def glob(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def text(s: str) -> bytes:
    raw = s.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def pkl(body: bytes) -> bytes:
    """A protocol-2 pickle of the opcodes in `body`."""
    return b"\x80\x02" + body + b"."


def storage_ref(key: str, storage_type: str = "FloatStorage", numel: int = 4) -> bytes:
    """BINPERSID of ("storage", torch.<storage_type>, key, "cpu", numel)."""
    return b"(" + text("storage") + glob("torch", storage_type) + text(key) + text("cpu") + b"K" + bytes([numel]) \
        + b"tQ"


def tensor_ops(key: str = "0", size: tuple[int, ...] = (4,), stride: tuple[int, ...] = (1,), offset: int = 0) -> bytes:
    """Opcodes rebuilding a float32 tensor with torch._utils._rebuild_tensor_v2."""
    def ints(values: tuple[int, ...]) -> bytes:
        return b"(" + b"".join(b"J" + struct.pack("<i", v) for v in values) + b"t"
    return glob("torch._utils", "_rebuild_tensor_v2") + b"(" + storage_ref(key) + b"J" + struct.pack("<i", offset) \
        + ints(size) + ints(stride) + b"\x89" + glob("collections", "OrderedDict") + b")Rt" + b"R"


def zip_checkpoint(data_pkl: bytes, storages: dict[str, bytes] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", data_pkl)
        z.writestr("archive/byteorder", "little")
        for key, raw in (storages or {}).items():
            z.writestr(f"archive/data/{key}", raw)
    return buf.getvalue()


def legacy_checkpoint(object_pkl: bytes, storages: dict[str, tuple[int, bytes]] | None = None) -> bytes:
    """The legacy format around `object_pkl`; storages maps key -> (element count, bytes)."""
    storages = storages or {}
    out = pickle.dumps(LEGACY_MAGIC, protocol=2) + pickle.dumps(1001, protocol=2) + pkl(b"}")
    out += object_pkl + pickle.dumps(list(storages), protocol=2)
    for numel, raw in storages.values():
        out += struct.pack("<q", numel) + raw
    return out


FLOATS = np.arange(4, dtype=np.float32)


def both_formats(object_pkl: bytes) -> dict[str, bytes]:
    """`object_pkl` as a zip and as a legacy checkpoint, with storage "0" holding FLOATS where it refers to it
    (a legacy file storing bytes no tensor uses is refused for that alone)."""
    uses_storage = text("storage") in object_pkl
    return {"zip": zip_checkpoint(object_pkl, {"0": FLOATS.tobytes()}),
            "legacy": legacy_checkpoint(object_pkl, {"0": (4, FLOATS.tobytes())} if uses_storage else {})}


# ---- the loader's own state, which no file may change ----

def _functions_of(obj: Any, module: str) -> Iterator[Any]:
    if inspect.isfunction(obj) and obj.__module__ == module:
        yield obj
    elif inspect.isclass(obj) and obj.__module__ == module:
        for member in vars(obj).values():
            fn = getattr(member, "__func__", member)
            if inspect.isfunction(fn):
                yield fn


def loader_state() -> dict[Any, Any]:
    """What a steered unpickler could change: every function's defaults, attributes, code and globals, what each
    module name is bound to, and the shared stand-ins."""
    state: dict[Any, Any] = {}
    for mod in (torch_load_module, _safe_pickle):
        for name, obj in list(vars(mod).items()):
            state[(mod.__name__, name)] = id(obj)
            for fn in _functions_of(obj, mod.__name__):
                state[(mod.__name__, name, fn.__qualname__)] = (
                    fn.__defaults__, repr(fn.__kwdefaults__), dict(fn.__dict__), fn.__code__, id(fn.__globals__))
    for op, fn in _safe_pickle._HANDLERS.items():
        state[("opcode", op)] = (id(fn), fn.__defaults__, dict(fn.__dict__), fn.__code__)
    for table in (torch_load_module._STORAGE_TYPES, torch_load_module._DTYPE_OBJECTS):
        state[id(table)] = {k: (id(v), v.name, v.dtype) for k, v in table.items()}
    for key, g in _safe_pickle.python_globals().items():
        state[("global", key)] = (g.name, g._build)
    return state


@pytest.fixture(scope="module")
def torch_checkpoints() -> dict[str, tuple[bytes, dict[str, np.ndarray]]]:
    """Small state dicts written by torch in both formats, with the arrays they hold."""
    sd = collections.OrderedDict(
        w=torch.randn(3, 4), b=torch.arange(5, dtype=torch.int64), h=torch.ones(2, 2, dtype=torch.float16),
        m=torch.tensor([True, False, True]), u=torch.arange(6, dtype=torch.uint8).reshape(2, 3).t())
    want = {k: v.numpy() for k, v in sd.items()}
    out = {}
    for name, zipped in (("zip", True), ("legacy", False)):
        buf = io.BytesIO()
        torch.save(sd, buf, _use_new_zipfile_serialization=zipped)
        out[name] = (buf.getvalue(), want)
    return out


def assert_normal_loads_work(checkpoints: dict[str, tuple[bytes, dict[str, np.ndarray]]]) -> None:
    for raw, want in checkpoints.values():
        got = torch_load(raw)
        assert list(got) == list(want)
        for k, arr in want.items():
            np.testing.assert_array_equal(got[k].numpy(), arr)


# ---- hostile pickles ----

def _build(target: bytes, state: bytes) -> bytes:
    return pkl(target + state + b"b")


def _slotstate(attr: str, value: bytes) -> bytes:
    return b"N}" + text(attr) + value + b"s\x86"  # (None, {attr: value})


def _dictstate(attr: str, value: bytes) -> bytes:
    return b"}" + text(attr) + value + b"s"


ALLOWED_GLOBALS = [("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_tensor_v3"),
                   ("torch._utils", "_rebuild_parameter"), ("collections", "OrderedDict"), ("builtins", "set"),
                   ("torch", "Size"), ("torch", "FloatStorage"), ("torch", "float32")]
NEW_VALUES = {"__defaults__": b"(K\x01K\x02t", "__kwdefaults__": b"}", "__dict__": b"}" + text("x") + b"K\x01s",
              "__code__": b"N", "__globals__": b"}", "__class__": glob("collections", "OrderedDict"),
              "dtype": b"N", "name": text("evil")}

HOSTILE: dict[str, bytes] = {}
for _module, _name in ALLOWED_GLOBALS:
    for _attr, _value in NEW_VALUES.items():
        _target = glob(_module, _name)
        HOSTILE[f"BUILD slotstate {_attr} on {_module}.{_name}"] = _build(_target, _slotstate(_attr, _value))
        HOSTILE[f"BUILD state {_attr} on {_module}.{_name}"] = _build(_target, _dictstate(_attr, _value))
    HOSTILE[f"SETITEM into {_module}.{_name}"] = pkl(glob(_module, _name) + text("k") + b"K\x01s")
    HOSTILE[f"SETITEMS into {_module}.{_name}"] = pkl(glob(_module, _name) + b"(" + text("k") + b"K\x01u")
    HOSTILE[f"APPEND to {_module}.{_name}"] = pkl(glob(_module, _name) + b"K\x01a")
    HOSTILE[f"APPENDS to {_module}.{_name}"] = pkl(glob(_module, _name) + b"(K\x01e")
    HOSTILE[f"ADDITEMS to {_module}.{_name}"] = pkl(glob(_module, _name) + b"(K\x01\x90")
    HOSTILE[f"NEWOBJ of {_module}.{_name}"] = pkl(glob(_module, _name) + b")\x81")
HOSTILE.update({
    # the attack: BUILD sets the defaults of the function a later load calls
    "BUILD __defaults__ then use": pkl(glob("torch._utils", "_rebuild_tensor_v2") + b"q\x00" + _slotstate(
        "__defaults__", b"(K\x01K\x02t") + b"b0" + b"h\x00"),
    "BUILD on a storage": pkl(storage_ref("0") + _slotstate("raw", b"N") + b"b"),
    "BUILD on a tensor": pkl(tensor_ops() + _dictstate("foo", b"N") + b"b"),
    "BUILD on a list": _build(b"]", _dictstate("x", b"N")),
    "BUILD on a dict": _build(b"}", _dictstate("x", b"N")),
    "BUILD items on an OrderedDict": _build(glob("collections", "OrderedDict") + b")R", _dictstate("items", b"N")),
    "BUILD __class__ on an OrderedDict": _build(glob("collections", "OrderedDict") + b")R",
                                                _dictstate("__class__", b"N")),
    "BUILD slotstate on an OrderedDict": _build(glob("collections", "OrderedDict") + b")R", _slotstate("x", b"N")),
    "SETITEM into a tuple": pkl(b")" + text("k") + b"K\x01s"),
    "SETITEM into a set": pkl(b"\x8f" + text("k") + b"K\x01s"),
    "APPEND to a dict": pkl(b"}K\x01a"),
    "APPEND to a storage": pkl(storage_ref("0") + b"K\x01a"),
    "ADDITEMS to a frozenset": pkl(glob("builtins", "frozenset") + b")R(K\x01\x90"),
    "REDUCE a storage type": pkl(glob("torch", "FloatStorage") + b")R"),
    "REDUCE a dtype": pkl(glob("torch", "float32") + b")R"),
    "REDUCE a list": pkl(b"])R"),
    "REDUCE with a list of arguments": pkl(glob("builtins", "set") + b"]R"),
    "OBJ of a storage type": pkl(b"(" + glob("torch", "FloatStorage") + b"o"),
    "OBJ of a string": pkl(b"(" + text("os.system") + b"o"),
    "INST of os.system": pkl(b"(" + text("echo pwned") + b"ios\nsystem\n"),
    "EXT1 from copyreg's registry": pkl(b"\x82\x01"),
    "persistent id not a storage": pkl(b"(" + text("module") + text("os") + b"tQ"),
    "persistent id of unknown storage type": pkl(b"(" + text("storage") + b"NK\x00" + text("cpu") + b"K\x01tQ"),
    "dotted global reaching a function's globals": pkl(b"\x8c\x0ctorch._utils\x8c\x1d_rebuild_tensor_v2.__globals__"
                                                       b"\x93"),
    "_codecs.encode with another codec": pkl(glob("_codecs", "encode") + text("x") + text("rot13") + b"\x86R"),
    "slice with four arguments": pkl(glob("builtins", "slice") + b"(K\x01K\x02K\x03K\x04tR"),
    "rebuild with a list as storage": pkl(glob("torch._utils", "_rebuild_tensor_v2") + b"(]K\x00)\x29\x89NtR"),
    "rebuild with a wrong arity": pkl(glob("torch._utils", "_rebuild_tensor_v2") + b")R"),
    "rebuild reading past its storage": pkl(tensor_ops(size=(5,))),
    "rebuild with negative offset": pkl(tensor_ops(offset=-1)),
    "rebuild with string sizes": pkl(glob("torch._utils", "_rebuild_tensor_v2") + b"(" + storage_ref("0")
                                     + b"K\x00" + text("4") + b"\x85K\x01\x85\x89NtR"),
    "parameter around a string": pkl(glob("torch._utils", "_rebuild_parameter") + text("x") + b"\x89N\x87R"),
    "v3 without a torch dtype": pkl(glob("torch._utils", "_rebuild_tensor_v3") + b"(" + storage_ref("0")
                                    + b"K\x00K\x04\x85K\x01\x85\x89NNtR"),
    "unhashable key": pkl(b"}]K\x01s"),
    "a tensor as a key": pkl(b"}" + tensor_ops() + b"K\x01s"),
    "a list inside a tuple key": pkl(b"}K\x01]\x86K\x01s"),
    "nothing left at STOP": pkl(b""),
    "GET of a missing memo entry": pkl(b"h\x07"),
    "POP of an empty stack": pkl(b"0K\x01"),
    "protocol 6": b"\x80\x06K\x01.",
    "out-of-band buffer": pkl(b"\x97"),
})
for _module, _name in [("os", "system"), ("posix", "system"), ("builtins", "eval"), ("builtins", "exec"),
                       ("builtins", "getattr"), ("builtins", "setattr"), ("builtins", "__import__"),
                       ("builtins", "open"), ("__builtin__", "eval"), ("copyreg", "_reconstructor"),
                       ("torch", "load"), ("torch._utils", "_rebuild_tensor"), ("subprocess", "Popen"),
                       ("collections", "defaultdict"), ("builtins", "dict"), ("builtins", "type")]:
    HOSTILE[f"GLOBAL {_module}.{_name}"] = pkl(glob(_module, _name) + text("x") + b"\x85R")
    HOSTILE[f"STACK_GLOBAL {_module}.{_name}"] = pkl(text(_module) + text(_name) + b"\x93")


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_pickles_are_refused_and_change_nothing(name, torch_checkpoints):
    before = loader_state()
    for fmt, raw in both_formats(HOSTILE[name]).items():
        with pytest.raises(TorchLoadError):
            torch_load(raw)
        assert loader_state() == before, f"{name} ({fmt}) changed the loader"
    assert_normal_loads_work(torch_checkpoints)


def test_forbidden_globals_are_named(tmp_path):
    for module, name in [("os", "system"), ("builtins", "eval"), ("builtins", "getattr")]:
        for raw in both_formats(HOSTILE[f"GLOBAL {module}.{name}"]).values():
            with pytest.raises(TorchLoadError, match=rf"{module}\.{name}"):
                torch_load(raw)


def test_refusals_say_what_is_wrong():
    cases = {"BUILD slotstate __defaults__ on torch._utils._rebuild_tensor_v2": r"BUILD at byte \d+.*set the state",
             "SETITEM into torch._utils._rebuild_tensor_v2": r"SETITEM at byte \d+.*_rebuild_tensor_v2",
             "REDUCE a storage type": r"REDUCE at byte \d+: calls .*not an allowed function",
             "rebuild reading past its storage": r"reads element 4 of a storage with 4",
             "GET of a missing memo entry": r"memo entry 7",
             "unhashable key": "cannot be a dict key"}
    for name, pattern in cases.items():
        with pytest.raises(TorchLoadError, match=pattern):
            torch_load(both_formats(HOSTILE[name])["zip"])


def test_hand_written_checkpoints_load_in_both_formats():
    body = glob("collections", "OrderedDict") + b")R(" + text("w") + tensor_ops() + text("t") + \
        tensor_ops(size=(2, 2), stride=(1, 2)) + text("e") + tensor_ops(size=(3, 2), stride=(1, 0)) + b"u"
    for raw in both_formats(pkl(body)).values():
        got = torch_load(raw)
        np.testing.assert_array_equal(got["w"].numpy(), FLOATS)
        np.testing.assert_array_equal(got["t"].numpy(), FLOATS.reshape(2, 2).T)
        np.testing.assert_array_equal(got["e"].numpy(), np.repeat(FLOATS[:3, None], 2, axis=1))


def test_an_ordered_dicts_metadata_attribute_is_kept():
    ref = torch.nn.Sequential(torch.nn.Linear(2, 2))
    for zipped in (True, False):
        buf = io.BytesIO()
        torch.save(ref.state_dict(), buf, _use_new_zipfile_serialization=zipped)
        got = torch_load(buf.getvalue())
        assert got._metadata == ref.state_dict()._metadata


def test_every_pickle_protocol_torch_writes():
    sd = {"w": torch.randn(2, 3), "n": {"s": {1, 2}, "f": frozenset([3]), "size": torch.Size([2]), "b": b"\x00\xff",
                                        "i": 2 ** 70, "x": -1.5, "sl": slice(1, None), "t": (1, "a")}}
    for protocol in (1, 2, 3, 4, 5):
        for zipped in (True, False):
            buf = io.BytesIO()
            torch.save(sd, buf, pickle_protocol=protocol, _use_new_zipfile_serialization=zipped)
            got = torch_load(buf.getvalue())
            np.testing.assert_array_equal(got["w"].numpy(), sd["w"].numpy())
            assert got["n"] == {**sd["n"], "size": (2,)}


# ---- the interpreter against Python's own unpickler, on plain data ----

def _random_data(rng: random.Random, depth: int = 0, shared: list | None = None) -> Any:
    shared = shared if shared is not None else []
    if shared and rng.random() < 0.1:
        return rng.choice(shared)
    kinds = ["int", "bigint", "float", "str", "bytes", "none", "bool"]
    kinds += ["list", "tuple", "dict", "set"] if depth < 4 else []
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.randint(-(2 ** 31), 2 ** 31)
    if kind == "bigint":
        return rng.randint(-(2 ** 200), 2 ** 200)
    if kind == "float":
        return rng.choice([rng.uniform(-1e9, 1e9), float("inf"), -0.0, 1e-300])
    if kind == "str":
        return "".join(rng.choice("ab\n\\'\"é€\U0001f600 ") for _ in range(rng.randint(0, 12)))
    if kind == "bytes":
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 12)))
    if kind in ("none", "bool"):
        return rng.choice([None, True, False])
    n = rng.randint(0, 5)
    if kind == "set":
        return {rng.randint(0, 99) for _ in range(n)} if rng.random() < 0.5 else frozenset(str(i) for i in range(n))
    items = [_random_data(rng, depth + 1, shared) for _ in range(n)]
    out: Any = {str(i): v for i, v in enumerate(items)} if kind == "dict" else (
        items if kind == "list" else tuple(items))
    shared.append(out)
    return out


def test_interpreter_matches_pickle_on_plain_data():
    rng = random.Random(1)
    allowed = _safe_pickle.python_globals()

    def find(module: str, name: str) -> Any:
        return allowed[(module, name)]

    for i in range(300):
        value = _random_data(rng)
        for protocol in range(6):
            data = pickle.dumps(value, protocol=protocol)
            got = _safe_pickle.Unpickler(data, find, lambda pid: None).load()
            assert got == value, (i, protocol)
            _assert_same_shape(got, value, {})


def _assert_same_shape(got: Any, want: Any, seen: dict[int, int]) -> None:
    """Same types throughout, and a container shared in `want` is shared, not copied, in `got`."""
    assert type(got) is type(want), (got, want)
    if isinstance(want, (list, tuple, dict)):
        if id(want) in seen:
            assert seen[id(want)] == id(got)
            return
        seen[id(want)] = id(got)
        pairs = zip(got.values(), want.values()) if isinstance(want, dict) else zip(got, want)
        for a, b in pairs:
            _assert_same_shape(a, b, seen)


# ---- shared objects, deep nesting and amplification ----

def _dag_of_lists(depth: int, leaf: bytes) -> bytes:
    """List k holds list k-1 twice, by memo reference: 8 bytes a level, 2**depth paths to the leaf."""
    body = b"(" + leaf + b"lq\x00"
    for k in range(1, depth + 1):
        body += b"(h" + bytes([k - 1]) + b"h" + bytes([k - 1]) + b"lq" + bytes([k])
    return pkl(body)


#: these inputs take milliseconds when handled right and years (2**60 paths, 3e10 copied items) when not: a limit far
#: above the first catches the second without failing on a loaded machine (no timing is asserted, only a hang)
HANG_GUARD_S = 20.0


def test_a_dag_of_shared_lists_loads_in_linear_time():
    raws = {"legacy": legacy_checkpoint(_dag_of_lists(60, b"N")),
            "legacy with a tensor": legacy_checkpoint(_dag_of_lists(60, tensor_ops()), {"0": (4, FLOATS.tobytes())}),
            "zip with a tensor": zip_checkpoint(_dag_of_lists(60, tensor_ops()), {"0": FLOATS.tobytes()})}
    assert len(raws["legacy"]) <= 520
    for name, raw in raws.items():
        start = time.perf_counter()
        got = torch_load(raw)
        assert time.perf_counter() - start < HANG_GUARD_S, name
        for _ in range(60):  # still shared, not copied
            assert len(got) == 2 and got[0] is got[1]
            got = got[0]
        if "tensor" in name:
            np.testing.assert_array_equal(got[0].numpy(), FLOATS)


def test_dict_keys_that_are_costly_to_hash_are_refused():
    # a tuple's hash is not cached and recurses: a DAG of shared tuples has 2**60 paths, a chain of 100000 nested
    # tuples overflows the C stack; both as a dict key
    dag = b"K\x00"
    for _ in range(60):
        dag += b"2\x86"  # DUP, TUPLE2: (t, t)
    chain = b"K\x00" + b"\x85" * 100_000
    for key in (dag, chain):
        for raw in both_formats(pkl(b"}" + key + b"Ns")).values():
            start = time.perf_counter()
            with pytest.raises(TorchLoadError, match="too large or too deeply nested"):
                torch_load(raw)
            assert time.perf_counter() - start < HANG_GUARD_S


def test_deeply_nested_lists_load_without_recursion():
    # each level: a MARK before, a LIST after; the nested lists are built and freed without recursion
    depth = 200_000
    raw = zip_checkpoint(pkl(b"(" * depth + b"]" + b"l" * depth))
    got = torch_load(raw)
    for _ in range(depth):
        got = got[0]
    assert got == []


def test_copying_a_large_object_over_and_over_is_refused():
    # torch.Size(big_list) costs the list's length each time: 300 thousand copies of a 100 thousand item list
    big = b"(" + b"N" * 100_000 + b"lq\x000"
    copies = (glob("torch", "Size") + b"q\x01" + b"0") + (b"h\x01h\x00\x85R0" * 300_000)
    raw = zip_checkpoint(pkl(big + copies + b"N"))
    start = time.perf_counter()
    with pytest.raises(TorchLoadError, match="far more work"):
        torch_load(raw)
    assert time.perf_counter() - start < HANG_GUARD_S


def test_a_huge_view_of_a_tiny_storage_is_refused():
    # stride 0 makes a 4-element storage look like 2**40 elements
    for raw in both_formats(pkl(tensor_ops(size=(1 << 20, 1 << 20), stride=(0, 0)))).values():
        with pytest.raises(TorchLoadError, match="would take the load past"):
            torch_load(raw)


def test_large_memo_indices_are_fine():
    for raw in both_formats(pkl(tensor_ops() + b"r\xff\xff\xff\xff0j\xff\xff\xff\xff")).values():
        np.testing.assert_array_equal(torch_load(raw).numpy(), FLOATS)


def test_a_zip_entry_declaring_a_huge_size_is_refused():
    raw = bytearray(zip_checkpoint(pkl(b"N")))
    data_pkl_entry = raw.index(b"PK\x01\x02")  # its central directory record: patch the uncompressed size
    struct.pack_into("<I", raw, data_pkl_entry + 24, 0xFFFFFFF0)
    with pytest.raises(TorchLoadError, match="would take the load past"):
        torch_load(bytes(raw))


def test_deflated_zip_entries(torch_checkpoints):
    raw, want = torch_checkpoints["zip"]
    src = zipfile.ZipFile(io.BytesIO(raw))

    def rezipped(method: int) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", compression=method) as z:
            for name in src.namelist():
                z.writestr(name, src.read(name))
        return out.getvalue()

    deflated = rezipped(zipfile.ZIP_DEFLATED)  # torch reads these too
    assert_normal_loads_work({"zip": (deflated, want)})
    # damage the deflate stream of the first entry, data.pkl, after its 30-byte header and name
    broken = bytearray(deflated)
    start = 30 + len("archive/data.pkl")
    broken[start:start + 4] = b"\xff\xff\xff\xff"
    with pytest.raises(TorchLoadError, match="damaged or truncated"):
        torch_load(bytes(broken))
    with pytest.raises(TorchLoadError, match="compressed with method 12"):
        torch_load(rezipped(zipfile.ZIP_BZIP2))


# ---- fuzzing ----

class _TookTooLong(BaseException):
    """Raised by the alarm in the middle of a load; not an Exception, so the loader cannot wrap it."""


def _mutate(rng: random.Random, raw: bytes) -> bytes:
    data = bytearray(raw)
    for _ in range(rng.choice([1, 1, 1, 2, 3, 8])):
        if not data:
            break
        i = rng.randrange(len(data))
        op = rng.randrange(7)
        if op == 0:
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[i] = rng.randrange(256)
        elif op == 2:
            del data[rng.randrange(1, len(data) + 1):]
        elif op == 3:
            data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 4:
            j = min(len(data), i + rng.randint(1, 64))
            data[i:i] = data[i:j]
        elif op == 5:
            del data[i:i + rng.randint(1, 16)]
        else:  # a byte that matters to pickles and sizes
            data[i] = rng.choice([0x00, 0xFF, 0x7F, 0x80, ord("("), ord("."), ord("h"), ord("R"), ord("b")])
    return bytes(data)


def _rezip(raw: bytes, rng: random.Random) -> bytes:
    """The zip checkpoint with its data.pkl mutated and written back, so the archive's checksums still hold and
    the mutation reaches the pickle."""
    src = zipfile.ZipFile(io.BytesIO(raw))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name in src.namelist():
            data = src.read(name)
            z.writestr(name, _mutate(rng, data) if name.endswith("data.pkl") else data)
    return out.getvalue()


def test_fuzzed_checkpoints_load_or_raise_torch_load_error(torch_checkpoints):
    cases = int(os.environ.get("TG_FUZZ_CASES", "500"))
    budget_s = 10.0
    rng = random.Random(20240611)
    zip_raw, legacy_raw = torch_checkpoints["zip"][0], torch_checkpoints["legacy"][0]
    buf = io.BytesIO()
    torch.save({"w": torch.randn(3), "i": [torch.arange(2)]}, buf, pickle_protocol=4)
    sources = [lambda: _mutate(rng, zip_raw), lambda: _mutate(rng, legacy_raw), lambda: _rezip(zip_raw, rng),
               lambda: _rezip(buf.getvalue(), rng)]

    def alarm(signum, frame):
        raise _TookTooLong()

    previous = signal.signal(signal.SIGALRM, alarm)
    outcomes: collections.Counter = collections.Counter()
    slowest = 0.0
    try:
        for case in range(cases):
            raw = sources[case % len(sources)]()
            start = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, budget_s)
            try:
                got = torch_load(raw)
                outcomes["loaded"] += 1
                del got
            except TorchLoadError as e:
                # the loader's last-resort wrapping of an unforeseen exception still counts as a failure here
                assert "could not be read" not in str(e), f"case {case}: {e}; input {raw!r}"
                outcomes["refused"] += 1
            except _TookTooLong:
                pytest.fail(f"case {case} took over {budget_s}s: {raw!r}")
            except BaseException as e:
                pytest.fail(f"case {case} raised {type(e).__name__}: {e}; input {raw!r}")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            slowest = max(slowest, time.perf_counter() - start)
    finally:
        signal.signal(signal.SIGALRM, previous)
    print(f"fuzz: {cases} cases, {dict(outcomes)}, slowest {slowest:.3f}s")
    assert outcomes["loaded"] + outcomes["refused"] == cases
    assert_normal_loads_work(torch_checkpoints)


def test_globals_the_pickle_returns_are_frozen_stand_ins():
    for module, name in [("torch._utils", "_rebuild_tensor_v2"), ("torch", "float32"), ("torch", "FloatStorage")]:
        for raw in both_formats(pkl(glob(module, name))).values():
            got = torch_load(raw)
            assert not inspect.isfunction(got) and not inspect.isclass(got) and not callable(got)
            with pytest.raises(AttributeError):
                got.name = "x"
